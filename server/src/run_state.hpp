// One run as the server sees it: its status, its numbered events (kept for replay), and the
// wakers of the connections following it. Written by the run's thread, read by any connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "kernex/json.hpp"

namespace kernex::server {

// AwaitingApproval: running, paused until a person decides on a tool call (approvals.hpp).
enum class RunStatus { Queued, Running, AwaitingApproval, Done, Failed, Cancelled };
std::string_view to_string(RunStatus status) noexcept;
std::optional<RunStatus> parse_run_status(std::string_view text) noexcept;
inline bool is_terminal(RunStatus s) {
  return s == RunStatus::Done || s == RunStatus::Failed || s == RunStatus::Cancelled;
}

struct RunEvent {
  std::uint64_t id = 0;  // 1, 2, 3... within the run
  std::string name;      // run_start, text_delta, tool_call, tool_result, usage, run_end, error
  Json data;
};

class RunState {
 public:
  RunState(std::string id, std::string tenant, std::string session, std::string created_at);

  const std::string id;
  const std::string tenant;
  const std::string session;
  const std::string created_at;  // UTC "YYYY-MM-DD HH:MM:SS"

  // Numbers the event and wakes every follower.
  void append(std::string name, Json data);
  void set_running();
  // The last word: status, the result (or error) object, then followers are woken for good.
  void finish(RunStatus status, Json result);

  // A run read back from the store (after a restart or once evicted from memory).
  void restore(RunStatus status, Json result, std::vector<RunEvent> events);
  // Shared runs (cluster mode): the events already stored, before this process follows or runs
  // it, and the status and placement the store reports while another node runs it.
  void preload(std::vector<RunEvent> events);
  void set_status(RunStatus status);  // non-terminal only; finish() ends a run
  void set_placement(std::string node, int attempt);

  RunStatus status() const;
  bool cancel_requested() const { return stop_.stop_requested(); }
  std::stop_token stop_token() const { return stop_.get_token(); }
  void request_cancel() { stop_.request_stop(); }

  struct Snapshot {
    std::vector<RunEvent> events;  // those with id > after
    bool finished = false;         // no event will follow these
  };
  Snapshot events_after(std::uint64_t after) const;
  std::uint64_t last_event_id() const;
  // Registers `waker` to be called once, from any thread, at the next event or finish; returns
  // false (and registers nothing) when there is already something beyond `after` to read.
  bool wait_after(std::uint64_t after, std::function<void()> waker);

  // {"run_id", "session_id", "status", "created_at", "result"?, "node"?, "attempt"?}
  Json summary() const;
  std::vector<RunEvent> all_events() const;
  std::chrono::steady_clock::time_point ended_at() const;

 private:
  void wake(std::unique_lock<std::mutex>& lock);

  mutable std::mutex mutex_;
  RunStatus status_ = RunStatus::Queued;
  std::vector<RunEvent> events_;
  std::vector<std::function<void()>> wakers_;
  Json result_;
  std::string node_;  // cluster mode: the node that runs or ran it
  int attempt_ = 0;
  std::chrono::steady_clock::time_point ended_at_{};
  std::stop_source stop_;
};

}  // namespace kernex::server
