// Runs that stopped on the client's tool calls, by call id: the client's next request carrying
// the results finds the run, whose stored result holds the turn so far (the run's own tool
// results included), and goes on from there. Bounded: the oldest are forgotten first, and a
// request whose calls are not found is taken as plain context (OpenAI's own behaviour).
#pragma once

#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace kernex::server {

class ParkedCalls {
 public:
  explicit ParkedCalls(std::size_t capacity = 10'000) : capacity_(capacity) {}
  void remember(const std::string& tenant, const std::string& run_id,
                const std::vector<std::string>& call_ids) {
    std::lock_guard lock(mutex_);
    for (const auto& id : call_ids) {
      if (!runs_.emplace(tenant + '\n' + id, run_id).second) continue;
      order_.push_back(tenant + '\n' + id);
      if (order_.size() > capacity_) {
        runs_.erase(order_.front());
        order_.pop_front();
      }
    }
  }
  std::optional<std::string> run_for(const std::string& tenant, const std::string& call_id) const {
    std::lock_guard lock(mutex_);
    auto it = runs_.find(tenant + '\n' + call_id);
    if (it == runs_.end()) return std::nullopt;
    return it->second;
  }

 private:
  const std::size_t capacity_;
  mutable std::mutex mutex_;
  std::map<std::string, std::string> runs_;
  std::deque<std::string> order_;
};

}  // namespace kernex::server
