#include "run_state.hpp"

namespace kernex::server {

std::string_view to_string(RunStatus status) noexcept {
  switch (status) {
    case RunStatus::Queued:
      return "queued";
    case RunStatus::Running:
      return "running";
    case RunStatus::AwaitingApproval:
      return "awaiting_approval";
    case RunStatus::Done:
      return "done";
    case RunStatus::Failed:
      return "failed";
    case RunStatus::Cancelled:
      return "cancelled";
  }
  return "failed";
}

std::optional<RunStatus> parse_run_status(std::string_view text) noexcept {
  for (RunStatus s : {RunStatus::Queued, RunStatus::Running, RunStatus::AwaitingApproval,
                      RunStatus::Done, RunStatus::Failed, RunStatus::Cancelled}) {
    if (to_string(s) == text) return s;
  }
  return std::nullopt;
}

RunState::RunState(std::string id_, std::string tenant_, std::string session_,
                   std::string created_at_)
    : id(std::move(id_)),
      tenant(std::move(tenant_)),
      session(std::move(session_)),
      created_at(std::move(created_at_)) {}

void RunState::wake(std::unique_lock<std::mutex>& lock) {
  std::vector<std::function<void()>> wakers;
  wakers.swap(wakers_);
  lock.unlock();
  for (auto& w : wakers) w();
}

void RunState::append(std::string name, Json data) {
  std::unique_lock lock(mutex_);
  if (is_terminal(status_)) return;
  events_.push_back(RunEvent{events_.size() + 1, std::move(name), std::move(data)});
  wake(lock);
}

void RunState::set_running() {
  std::lock_guard lock(mutex_);
  if (status_ == RunStatus::Queued) status_ = RunStatus::Running;
}

void RunState::finish(RunStatus status, Json result) {
  std::unique_lock lock(mutex_);
  if (is_terminal(status_)) return;
  status_ = status;
  result_ = std::move(result);
  ended_at_ = std::chrono::steady_clock::now();
  wake(lock);
}

void RunState::restore(RunStatus status, Json result, std::vector<RunEvent> events) {
  std::unique_lock lock(mutex_);
  status_ = status;
  result_ = std::move(result);
  events_ = std::move(events);
  ended_at_ = std::chrono::steady_clock::now();
  wake(lock);
}

void RunState::preload(std::vector<RunEvent> events) {
  std::unique_lock lock(mutex_);
  if (events.size() <= events_.size()) return;
  events_ = std::move(events);
  wake(lock);
}

void RunState::set_status(RunStatus status) {
  std::lock_guard lock(mutex_);
  if (!is_terminal(status_) && !is_terminal(status)) status_ = status;
}

void RunState::set_placement(std::string node, int attempt) {
  std::lock_guard lock(mutex_);
  node_ = std::move(node);
  attempt_ = attempt;
}

RunStatus RunState::status() const {
  std::lock_guard lock(mutex_);
  return status_;
}

RunState::Snapshot RunState::events_after(std::uint64_t after) const {
  std::lock_guard lock(mutex_);
  Snapshot snap;
  if (after < events_.size())
    snap.events.assign(events_.begin() + static_cast<std::ptrdiff_t>(after), events_.end());
  snap.finished = is_terminal(status_);
  return snap;
}

std::uint64_t RunState::last_event_id() const {
  std::lock_guard lock(mutex_);
  return events_.size();
}

bool RunState::wait_after(std::uint64_t after, std::function<void()> waker) {
  std::lock_guard lock(mutex_);
  if (after < events_.size() || is_terminal(status_)) return false;
  wakers_.push_back(std::move(waker));
  return true;
}

Json RunState::summary() const {
  std::lock_guard lock(mutex_);
  Json j{{"run_id", id},
         {"session_id", session},
         {"status", std::string(to_string(status_))},
         {"created_at", created_at}};
  if (!node_.empty()) {
    j["node"] = node_;
    j["attempt"] = attempt_;
  }
  if (is_terminal(status_) && !result_.is_null()) {
    if (status_ == RunStatus::Failed) {
      j["error"] = result_;
    } else {
      j["result"] = result_;
    }
  }
  return j;
}

std::vector<RunEvent> RunState::all_events() const {
  std::lock_guard lock(mutex_);
  return events_;
}

std::chrono::steady_clock::time_point RunState::ended_at() const {
  std::lock_guard lock(mutex_);
  return ended_at_;
}

}  // namespace kernex::server
