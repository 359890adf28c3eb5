// Streaming an answer into a chat: the first text is sent as a message, later text edits it, and
// text past 4096 characters continues in further messages. Every send and edit to a chat goes
// through that chat's ChatPacer, so a chat never gets two within `interval` (Telegram allows about
// one a second; a 429 also pushes the chat's next slot back by its retry_after).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "bot_api.hpp"

namespace kernex::telegram {

class ChatPacer {
 public:
  explicit ChatPacer(std::chrono::milliseconds interval) : interval_(interval) {}
  using Send = std::function<Result<Json>()>;
  // Waits for the chat's slot, then sends; the next slot opens `interval` after `send` returned.
  Result<Json> paced(std::int64_t chat, const Send& send, std::stop_token stop);
  // Sends only when the chat's slot is open now (nullopt: it is not; nothing was sent).
  std::optional<Result<Json>> try_paced(std::int64_t chat, const Send& send);

 private:
  struct Slot {
    std::mutex mutex;
    std::chrono::steady_clock::time_point next{};
  };
  std::shared_ptr<Slot> slot(std::int64_t chat);

  std::chrono::milliseconds interval_;
  std::mutex mutex_;
  std::map<std::int64_t, std::shared_ptr<Slot>> slots_;
};

class AnswerStream {
 public:
  AnswerStream(BotApi& api, ChatPacer& pacer, std::int64_t chat, std::stop_token stop)
      : api_(api), pacer_(pacer), chat_(chat), stop_(stop) {}

  // More of the answer: shown at once when the chat's slot is open, else at a later call.
  void append(const std::string& delta);
  // The whole answer, shown in full (waiting for slots as needed). An empty answer becomes
  // `empty_note`. Starts a new segment: later text goes to new messages.
  Result<void> finish(const std::string& text, const std::string& empty_note);
  std::string text() const { return text_; }

 private:
  // Sends or edits messages until they show `text`; `wait` false: stops at a closed slot.
  Result<void> render(const std::string& text, bool wait);
  Result<void> put(std::size_t index, const std::string& part, bool wait, bool& sent);

  struct Sent {
    std::int64_t id = 0;
    std::string text;
  };
  BotApi& api_;
  ChatPacer& pacer_;
  std::int64_t chat_;
  std::stop_token stop_;
  std::string text_;
  std::vector<Sent> sent_;
};

}  // namespace kernex::telegram
