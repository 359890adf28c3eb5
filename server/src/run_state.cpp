#include "run_state.hpp"

#include <algorithm>
#include <cstdint>

#include "kernex/log.hpp"

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
  std::map<std::uint64_t, std::function<void()>> wakers;
  wakers.swap(wakers_);
  if (is_terminal(status_)) wakers.merge(end_wakers_);
  lock.unlock();
  for (auto& [ticket, w] : wakers) w();
}

bool RunState::push_locked(std::string& name, Json& data) {
  if (is_terminal(status_) || muted_ || repeated(name, data)) return false;
  if (name == "text_delta" || name == "tool_call") produced_.store(true, std::memory_order_relaxed);
  events_.push_back(std::make_shared<const RunEvent>(
      RunEvent{events_.size() + 1, std::move(name), std::move(data)}));
  return true;
}

void RunState::append(std::string name, Json data) {
  std::unique_lock lock(mutex_);
  if (push_locked(name, data)) wake(lock);
}

void RunState::begin_attempt() {
  std::lock_guard lock(mutex_);
  muted_ = false;
  earlier_ = events_;
  earlier_at_ = 0;
}

void RunState::mute() {
  std::lock_guard lock(mutex_);
  muted_ = true;
}

void RunState::unmute() {
  std::lock_guard lock(mutex_);
  muted_ = false;
}

// A replay re-emits a subsequence of the earlier events, in their order (it skips the text and
// usage of replayed model answers, and an approval_requested already decided); equal name and
// data (tool call ids and arguments included) is the same event.
bool RunState::repeated(const std::string& name, const Json& data) {
  if (earlier_at_ >= earlier_.size()) return false;
  if (name != "text_delta" && name != "usage") {
    for (std::size_t j = earlier_at_; j < earlier_.size(); ++j) {
      if (earlier_[j]->name != name || earlier_[j]->data != data) continue;
      earlier_at_ = j + 1;
      return true;
    }
  }
  earlier_.clear();  // the replay is over: from here on every event is new
  earlier_at_ = 0;
  return false;
}

void RunState::set_running() {
  std::lock_guard lock(mutex_);
  if (status_ == RunStatus::Queued) status_ = RunStatus::Running;
}

void RunState::finish(RunStatus status, Json result) {
  std::lock_guard ending(end_mutex_);
  before_end(status, result);
  std::unique_lock lock(mutex_);
  finish_locked(status, std::move(result), lock);
}

void RunState::end(std::string event, RunStatus status, Json result) {
  Json data = result;
  end(std::move(event), std::move(data), status, std::move(result));
}

void RunState::end(std::string event, Json data, RunStatus status, Json result) {
  std::lock_guard ending(end_mutex_);
  before_end(status, result);
  std::unique_lock lock(mutex_);
  push_locked(event, data);
  finish_locked(status, std::move(result), lock);
}

void RunState::set_before_end(BeforeEnd hook) {
  std::lock_guard lock(mutex_);
  before_end_ = std::move(hook);
}

void RunState::before_end(RunStatus status, const Json& result) {
  BeforeEnd hook;
  {
    std::lock_guard lock(mutex_);
    if (is_terminal(status_)) return;
    hook.swap(before_end_);
  }
  if (!hook) return;
  try {
    hook(*this, status, result);
  } catch (const std::exception& e) {
    log(LogLevel::Error, "serve: run " + id + ": storing what its end tells failed: " + e.what());
  }
}

void RunState::finish_locked(RunStatus status, Json result, std::unique_lock<std::mutex>& lock) {
  if (is_terminal(status_)) return;
  status_ = status;
  result_ = std::move(result);
  ended_at_ = std::chrono::steady_clock::now();
  shown_.reset();
  wake(lock);
}

void RunState::restore(RunStatus status, Json result, std::vector<RunEvent> events) {
  std::unique_lock lock(mutex_);
  status_ = status;
  result_ = std::move(result);
  events_.clear();
  for (auto& e : events) events_.push_back(std::make_shared<const RunEvent>(std::move(e)));
  pager_ = nullptr;
  stored_count_ = 0;
  ended_at_ = std::chrono::steady_clock::now();
  wake(lock);
}

void RunState::restore_paged(RunStatus status, Json result, std::uint64_t count, Pager pager) {
  std::unique_lock lock(mutex_);
  status_ = status;
  result_ = std::move(result);
  events_.clear();
  stored_count_ = count;
  pager_ = std::move(pager);
  ended_at_ = std::chrono::steady_clock::now();
  wake(lock);
}

void RunState::preload(std::vector<RunEvent> events) {
  std::unique_lock lock(mutex_);
  if (events.size() <= events_.size()) return;
  events_.clear();
  for (auto& e : events) events_.push_back(std::make_shared<const RunEvent>(std::move(e)));
  wake(lock);
}

bool RunState::cancel_requested() const {
  std::lock_guard lock(stop_mutex_);
  return stop_.stop_requested();
}

std::stop_token RunState::stop_token() const {
  std::lock_guard lock(stop_mutex_);
  return stop_.get_token();
}

void RunState::request_cancel() {
  std::stop_source source;
  {
    std::lock_guard lock(stop_mutex_);
    source = stop_;
  }
  source.request_stop();  // outside the lock: callbacks may ask cancel_requested()
}

void RunState::rearm() {
  std::lock_guard lock(stop_mutex_);
  if (stop_.stop_requested()) stop_ = std::stop_source();
}

void RunState::show_stored(std::uint64_t stored) {
  std::unique_lock lock(mutex_);
  shown_ = stored;
  wake(lock);
}

void RunState::show_all() {
  std::unique_lock lock(mutex_);
  shown_.reset();
  wake(lock);
}

std::size_t RunState::visible() const {
  const std::size_t n = events_.size();
  return shown_ ? static_cast<std::size_t>(std::min<std::uint64_t>(*shown_, n)) : n;
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
  Snapshot snap;
  Page page = read(after, SIZE_MAX, true);  // every event, stored or not (its executor's view)
  for (const auto& e : page.events) snap.events.push_back(*e);
  snap.finished = page.finished;
  return snap;
}

RunState::Page RunState::page_after(std::uint64_t after, std::size_t max) const {
  return read(after, max, false);
}

RunState::Page RunState::read(std::uint64_t after, std::size_t max, bool all) const {
  Page page;
  std::unique_lock lock(mutex_);
  if (pager_) {
    const std::uint64_t count = stored_count_;
    if (after >= count) {
      page.finished = true;
      return page;
    }
    Pager pager = pager_;
    lock.unlock();  // the store's read is slow; appends and other followers go on meanwhile
    auto read = pager(after, max);
    if (!read) {
      page.failed = true;
      return page;
    }
    for (auto& e : *read) page.events.push_back(std::make_shared<const RunEvent>(std::move(e)));
    // A store that answers nothing more has nothing more: the stream ends rather than spins.
    page.finished = read->empty() || page.events.back()->id >= count;
    return page;
  }
  const std::size_t n = all ? events_.size() : visible();
  if (after < n) {
    const auto first = events_.begin() + static_cast<std::ptrdiff_t>(after);
    const std::size_t take = std::min<std::size_t>(max, n - static_cast<std::size_t>(after));
    page.events.assign(first, first + static_cast<std::ptrdiff_t>(take));
  }
  page.finished = is_terminal(status_) && after + page.events.size() >= events_.size();
  return page;
}

RunState::Rendered RunState::cached_render(std::uint64_t id, const std::string& key) {
  std::lock_guard lock(render_mutex_);
  auto it = rendered_.find({id, key});
  return it == rendered_.end() ? nullptr : it->second.lock();
}

RunState::Rendered RunState::shared_render(std::uint64_t id, const std::string& key,
                                           const std::function<Rendered()>& make) {
  if (auto held = cached_render(id, key)) return held;
  Rendered made = make();  // outside the lock: rendering a big event takes a while
  std::lock_guard lock(render_mutex_);
  std::erase_if(rendered_, [](const auto& entry) { return entry.second.expired(); });
  auto& slot = rendered_[{id, key}];
  if (auto other = slot.lock()) return other;  // another follower rendered it meanwhile
  slot = made;
  return made;
}

std::uint64_t RunState::last_event_id() const {
  std::lock_guard lock(mutex_);
  return pager_ ? stored_count_ : events_.size();
}

std::optional<std::uint64_t> RunState::wait_after(std::uint64_t after,
                                                  std::function<void()> waker) {
  std::lock_guard lock(mutex_);
  if (after < visible() || is_terminal(status_)) return std::nullopt;
  const std::uint64_t ticket = ++next_ticket_;
  wakers_.emplace(ticket, std::move(waker));
  return ticket;
}

std::optional<std::uint64_t> RunState::wait_ended(std::function<void()> waker) {
  std::lock_guard lock(mutex_);
  if (is_terminal(status_)) return std::nullopt;
  const std::uint64_t ticket = ++next_ticket_;
  end_wakers_.emplace(ticket, std::move(waker));
  return ticket;
}

void RunState::expect_record() {
  std::lock_guard lock(mutex_);
  record_ = Record::Pending;
}

void RunState::settle_record(bool stored) {
  std::unique_lock lock(mutex_);
  record_ = stored ? Record::Recorded : Record::Failed;
  wake(lock);
}

RunState::Record RunState::record() const {
  std::lock_guard lock(mutex_);
  return record_;
}

std::optional<std::uint64_t> RunState::wait_recorded(std::function<void()> waker) {
  std::lock_guard lock(mutex_);
  if (record_ != Record::Pending) return std::nullopt;
  const std::uint64_t ticket = ++next_ticket_;
  wakers_.emplace(ticket, std::move(waker));
  return ticket;
}

void RunState::unwait(std::uint64_t ticket) {
  std::lock_guard lock(mutex_);
  wakers_.erase(ticket);
  end_wakers_.erase(ticket);
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
  std::vector<RunEvent> out;
  out.reserve(events_.size());
  for (const auto& e : events_) out.push_back(*e);
  return out;
}

std::chrono::steady_clock::time_point RunState::ended_at() const {
  std::lock_guard lock(mutex_);
  return ended_at_;
}

}  // namespace kernex::server
