// A loopback fake of the Telegram Bot API for channel tests and the Telegram bench: a real HTTP
// server on 127.0.0.1 (Beast, inside fake_bot_api.cpp) serving getUpdates (long poll, offsets
// confirmed as Telegram does), sendMessage, editMessageText, answerCallbackQuery, getFile and file
// downloads. It enforces Telegram's limits and counts every breach: a second edit in a chat within
// `edit_interval` gets 429 with parameters.retry_after (and a call to that chat before the retry
// time is another breach), a text over 4096 UTF-16 units gets 400, an edit that changes nothing
// gets 400 "message is not modified".
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernex/json.hpp"

namespace kernex::test {

class FakeBotApi {
 public:
  struct Options {
    std::string token = "123:TEST-TOKEN";
    std::chrono::milliseconds edit_interval{1000};
    int retry_after_s = 1;
  };
  struct Message {
    std::int64_t chat = 0;
    std::int64_t id = 0;
    std::string text;
    Json reply_markup;
    int edits = 0;
  };
  struct Stats {
    std::uint64_t sends = 0, edits = 0;
    std::uint64_t rate_limited = 0;   // 429s given (each a request over the limit)
    std::uint64_t early_retries = 0;  // requests to a chat before its retry_after passed
    std::uint64_t too_long = 0;       // 400: text over 4096
    std::uint64_t not_modified = 0;   // 400: an edit to the same text
    std::uint64_t get_updates = 0;
    std::uint64_t redelivered = 0;  // updates returned again after a later offset confirmed them
  };

  FakeBotApi();
  explicit FakeBotApi(Options options);
  ~FakeBotApi();
  FakeBotApi(const FakeBotApi&) = delete;
  FakeBotApi& operator=(const FakeBotApi&) = delete;

  std::string base_url() const;  // http://127.0.0.1:<port>
  const std::string& token() const;

  // What people do; each returns the update_id.
  std::int64_t send_text(std::int64_t chat, std::int64_t user, const std::string& text,
                         const std::string& chat_type = "private");
  std::int64_t send_document(std::int64_t chat, std::int64_t user, const std::string& file_name,
                             const std::string& content, const std::string& caption);
  std::int64_t press_button(std::int64_t chat, std::int64_t user, std::int64_t message_id,
                            const std::string& callback_data);
  // The next `count` edits in `chat` get 429 with `retry_after_s` whatever their timing.
  void force_rate_limit(std::int64_t chat, int count, int retry_after_s);

  std::vector<Message> messages(std::int64_t chat) const;
  std::vector<std::string> callback_answers() const;
  // The offset of the latest getUpdates (0 before any).
  std::int64_t last_offset() const;
  Stats stats() const;
  // Waits (no polling: woken by every request served) until `done` holds or `timeout` passed.
  bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The concatenated texts of `chat`'s messages sent after message id `after` (the bot's answers).
std::string joined_texts(const std::vector<FakeBotApi::Message>& messages, std::int64_t after = 0);

}  // namespace kernex::test
