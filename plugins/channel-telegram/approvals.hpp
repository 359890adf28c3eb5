// Approvals as inline keyboard buttons: a message names the tool call and offers Approve, Deny
// and Always; the callback query of a pressed button (callback_data "ap:<id>:y|n|a") resolves it.
// Unanswered within the timeout, or on shutdown: denied. Each asked approval is recorded in the
// channel's state until decided; one a stop or crash left is told to its chat by the next process,
// and its buttons answered as ended by the restart (TelegramState::interrupted).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>

#include "answer_stream.hpp"
#include "kernex/approval.hpp"
#include "telegram_state.hpp"

namespace kernex::telegram {

class Approvals {
 public:
  Approvals(std::chrono::seconds timeout, TelegramState& state)
      : timeout_(timeout), state_(state) {}

  // Asks in `chat` and waits for a button (or the timeout, or `stop`). Only `requester` (whose
  // message started the turn) may press it: in a group, one member must not approve, or say
  // "always" for, another's tool call.
  ApprovalDecision ask(BotApi& api, ChatPacer& pacer, std::int64_t chat, std::int64_t requester,
                       const ApprovalRequest& request, std::stop_token stop);
  // A pressed button by `user` in `chat`: the text to answer the callback query with.
  std::string resolve(const std::string& data, std::int64_t chat, std::int64_t user);
  std::size_t pending() const;

 private:
  struct Pending {
    std::int64_t chat = 0;
    std::int64_t requester = 0;
    std::optional<ApprovalVerdict> verdict;
  };
  std::chrono::seconds timeout_;
  TelegramState& state_;
  mutable std::mutex mutex_;
  std::condition_variable_any changed_;
  std::map<std::string, std::shared_ptr<Pending>> pending_;
  std::uint64_t next_id_ = 1;
};

}  // namespace kernex::telegram
