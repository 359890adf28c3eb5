// One run as the server sees it: its status, its numbered events (kept for replay), and the
// wakers of the connections following it. Written by the run's thread, read by any connection.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>
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

  // Numbers the event and wakes every follower; drops it while muted, or when it repeats what an
  // earlier attempt emitted (begin_attempt).
  void append(std::string name, Json data);
  // A new attempt of the run starts: resumed after it was parked for an approval, or on another
  // node after kill -9. It replays its journal, and so emits again what earlier attempts emitted
  // (run_start, the replayed calls' tool_call and tool_result, a decided approval's
  // approval_resolved). Those are matched in order against the events already here and dropped,
  // so each is in the stream once under its first id; the first event that is new (or any
  // text_delta or usage, which only a live model call emits) ends the matching. Unmutes.
  void begin_attempt();
  // The attempt is suspended for an approval: what it emits from here on (the put-off call's
  // denial) is not the run's, and is dropped until unmute() or begin_attempt().
  void mute();
  void unmute();
  void set_running();
  // The last word: status, the result (or error) object, then followers are woken for good.
  void finish(RunStatus status, Json result);
  // The last event and the last word at once: a follower woken by `event` (run_end) already sees
  // the terminal status when it asks for the run (a client reading the status on run_end must
  // never find the run still running). `data` is the event's (default: the result).
  void end(std::string event, RunStatus status, Json result);
  void end(std::string event, Json data, RunStatus status, Json result);

  // Called once, on the thread that ends the run, before anyone can hear that it ended (its last
  // event, its status): what a client is told on the end must already be stored (the Responses
  // API's response, the tool calls a chat completion stops on), whether or not the client is
  // still connected to read it. Set before the run starts; an exception is logged and ignored.
  using BeforeEnd = std::function<void(const RunState& run, RunStatus status, const Json& result)>;
  void set_before_end(BeforeEnd hook);

  // A run read back from the store (after a restart or once evicted from memory).
  void restore(RunStatus status, Json result, std::vector<RunEvent> events);
  // Reads `count` stored events a page at a time (events after `after`, at most `max` of them):
  // a finished run's log stays in the store, not in memory, however many follow it.
  using Pager =
      std::function<std::optional<std::vector<RunEvent>>(std::uint64_t after, std::size_t max)>;
  void restore_paged(RunStatus status, Json result, std::uint64_t count, Pager pager);
  // Shared runs (cluster mode): the events already stored, before this process follows or runs
  // it, and the status and placement the store reports while another node runs it.
  void preload(std::vector<RunEvent> events);
  void set_status(RunStatus status);  // non-terminal only; finish() ends a run
  // Cluster mode, the executing node: followers see only the events stored so far (up to
  // `stored`), so an event id a client saw is never given to another event by the attempt that
  // resumes the run elsewhere after kill -9. show_all() lifts it (the run ended, or left).
  void show_stored(std::uint64_t stored);
  void show_all();
  void set_placement(std::string node, int attempt);

  RunStatus status() const;
  bool cancel_requested() const;
  std::stop_token stop_token() const;
  void request_cancel();
  // A fresh stop source for a run that runs again after it stopped without ending (cluster mode:
  // suspended for an approval, then claimed again by the same node).
  void rearm();

  struct Snapshot {
    std::vector<RunEvent> events;  // those with id > after
    bool finished = false;         // no event will follow these
  };
  // Every event after `after`, those not stored yet included (show_stored hides them only from
  // followers, page_after).
  Snapshot events_after(std::uint64_t after) const;
  // At most `max` events after `after`, shared (not copied): what a follower sends next.
  struct Page {
    std::vector<std::shared_ptr<const RunEvent>> events;
    bool finished = false;  // no event will follow these
    bool failed = false;    // the store could not be read: the follower should reconnect
  };
  Page page_after(std::uint64_t after, std::size_t max) const;
  // An event rendered by `key`'s renderer that is larger than a follower's buffer (a long
  // answer's run_end): rendered once and shared by every follower sending it at the time,
  // rather than a copy each. `make` renders it when no follower holds it.
  using Rendered = std::shared_ptr<const std::string>;
  Rendered shared_render(std::uint64_t id, const std::string& key,
                         const std::function<Rendered()>& make);
  // That rendering, if a follower holds it now.
  Rendered cached_render(std::uint64_t id, const std::string& key);
  std::uint64_t last_event_id() const;
  // Registers `waker` to be called once, from any thread, at the next event or finish; returns
  // its ticket, or nothing (and registers nothing) when there is already something beyond
  // `after` to read.
  std::optional<std::uint64_t> wait_after(std::uint64_t after, std::function<void()> waker);
  // Like wait_after, but the waker fires only once the run has ended, not at each event: a client
  // waiting for a non-streaming reply is woken once, not once per event (each wake is a post to
  // its connection's thread).
  std::optional<std::uint64_t> wait_ended(std::function<void()> waker);
  // Drops a waker whose wait ended otherwise (a heartbeat's timeout), so a follower of a run that
  // stays quiet for a day does not pile one up per heartbeat.
  void unwait(std::uint64_t ticket);

  // A new run whose row is on its way to the store (RunManager::submit queues it): until it is
  // committed, no client may hear of the run, not even a 200 (a kill -9 would lose what it was
  // told of). settle_record() wakes the waiters, whatever the run did meanwhile (an interrupt
  // may have cancelled it already). Runs read back from the store are Recorded.
  enum class Record { Recorded, Pending, Failed };
  void expect_record();
  void settle_record(bool stored);
  Record record() const;
  // True once, for a run made by this process's RunManager::submit: its first attempt, whose
  // journal holds nothing yet (run ids are new and random). A restored run, or a later attempt
  // (after a park), answers false.
  bool take_first_attempt() { return first_attempt_.exchange(false); }
  void mark_new() { first_attempt_ = true; }
  // Like wait_after, for the record: nothing (and no waker) once it is settled.
  std::optional<std::uint64_t> wait_recorded(std::function<void()> waker);

  // {"run_id", "session_id", "status", "created_at", "result"?, "node"?, "attempt"?}
  Json summary() const;
  std::vector<RunEvent> all_events() const;
  std::chrono::steady_clock::time_point ended_at() const;

  // Whether the model has produced anything yet, text or a tool call: until it has, the run's
  // fiber slices go ahead of new runs in the pool's queue (run_manager.cpp), so a burst of new
  // runs does not hold back first texts. Only until then: a run that loops on tool calls without
  // text would otherwise keep its place ahead of every new run (other tenants' too) for life.
  bool produced() const { return produced_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> produced_{false};
  std::atomic<bool> first_attempt_{false};
  void wake(std::unique_lock<std::mutex>& lock);
  bool push_locked(std::string& name, Json& data);  // appends unless dropped (mutex_ held)
  void finish_locked(RunStatus status, Json result, std::unique_lock<std::mutex>& lock);
  void before_end(RunStatus status, const Json& result);  // runs the hook, once (mutex_ not held)
  BeforeEnd before_end_;
  // Held by an end from its hook to its status: two threads may end one run (a cluster executor
  // and a follower that read the stored end), and the one without the hook must not announce the
  // end while the other still stores what it tells.
  std::mutex end_mutex_;

  mutable std::mutex mutex_;
  RunStatus status_ = RunStatus::Queued;
  std::vector<std::shared_ptr<const RunEvent>> events_;
  std::uint64_t stored_count_ = 0;      // restore_paged: the events the pager reads
  std::optional<std::uint64_t> shown_;  // show_stored: followers see events up to this id
  std::size_t visible() const;          // the events followers may read (mutex_ held)
  bool repeated(const std::string& name, const Json& data);  // begin_attempt's match (mutex_ held)
  std::vector<std::shared_ptr<const RunEvent>> earlier_;     // begin_attempt: not matched yet
  std::size_t earlier_at_ = 0;                               // the next one that may match
  bool muted_ = false;
  Record record_ = Record::Recorded;
  Page read(std::uint64_t after, std::size_t max, bool all) const;  // all: unstored ones too
  Pager pager_;
  std::mutex render_mutex_;
  std::map<std::pair<std::uint64_t, std::string>, std::weak_ptr<const std::string>> rendered_;
  std::map<std::uint64_t, std::function<void()>> wakers_;
  std::map<std::uint64_t, std::function<void()>> end_wakers_;  // wait_ended's
  std::uint64_t next_ticket_ = 0;
  Json result_;
  std::string node_;  // cluster mode: the node that runs or ran it
  int attempt_ = 0;
  std::chrono::steady_clock::time_point ended_at_{};
  mutable std::mutex stop_mutex_;
  std::stop_source stop_;
};

}  // namespace kernex::server
