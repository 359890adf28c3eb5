// The Telegram target's workload: `chats` people each talk to the bot for `duration`, sending
// their next message as soon as the whole answer to the last one arrived. Every answer is checked
// in full against the drip provider's formula; the fake Bot API counts every breach of the limits.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "telegram_harness.hpp"

namespace kernex::test {

struct LoadFigures {
  std::uint64_t answers_asked = 0;
  std::uint64_t answers_complete = 0;  // delivered in full, byte for byte
  std::uint64_t answers_missing = 0;   // not complete within the wait
  double seconds = 0;
  FakeBotApi::Stats bot;
};

// Whether the bot's texts after `after` are the answer to `message`, at some history length.
inline bool answered(const std::string& shown, const std::string& message, std::size_t length,
                     std::size_t max_history) {
  for (std::size_t h = 0; h <= max_history; ++h)
    if (shown == drip_answer(h, message, length)) return true;
  return false;
}

inline LoadFigures run_chat_load(TelegramHarness& h, int chats, std::chrono::seconds duration,
                                 std::size_t answer_length) {
  LoadFigures figures;
  std::atomic<std::uint64_t> asked{0}, complete{0}, missing{0};
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + duration;
  std::vector<std::thread> people;
  for (int i = 0; i < chats; ++i) {
    people.emplace_back([&, i] {
      const std::int64_t chat = 5000 + i, user = 7;
      for (int turn = 0; std::chrono::steady_clock::now() < end; ++turn) {
        const std::int64_t after = h.last_id(chat);
        const std::string message =
            "chat " + std::to_string(chat) + " turn " + std::to_string(turn);
        h.bot().send_text(chat, user, message);
        ++asked;
        std::string shown;
        const bool ok = h.bot().wait_until(
            [&] {
              shown = joined_texts(h.bot().messages(chat), after);
              return answered(shown, message, answer_length, 2 * turn);
            },
            std::chrono::seconds(60));
        ++(ok ? complete : missing);
        if (!ok) return;
      }
    });
  }
  for (auto& p : people) p.join();
  figures.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  figures.answers_asked = asked;
  figures.answers_complete = complete;
  figures.answers_missing = missing;
  figures.bot = h.bot().stats();
  return figures;
}

}  // namespace kernex::test
