// The Telegram target: N chats (default 20) streaming answers at once for S seconds (default 60)
// through plugins/channel-telegram against the loopback fake Bot API, which enforces Telegram's
// per-chat edit limit. Beside it, the baseline in the same run: the same chats streamed the way
// many bots do it, one editMessageText per model chunk, unpaced; the fake counts its 429s.
//   telegram_chats [SECONDS] [CHATS]
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "kernex/http/client.hpp"
#include "telegram_load.hpp"

namespace {

using kernex::Json;
using kernex::test::FakeBotApi;

constexpr std::size_t kAnswerLength = 1500, kChunk = 20;
constexpr auto kChunkDelay = std::chrono::milliseconds(40);

// Unpaced streaming: send, then edit after every chunk, ignoring 429s (as the field does).
FakeBotApi::Stats baseline(int chats, std::chrono::seconds duration) {
  FakeBotApi bot;
  const auto end = std::chrono::steady_clock::now() + duration;
  std::vector<std::thread> streams;
  for (int i = 0; i < chats; ++i) {
    streams.emplace_back([&, i] {
      kernex::http::ClientOptions options;
      options.max_retries = 0;
      kernex::http::Client client(options);
      auto call = [&](const std::string& method, const Json& params) {
        kernex::http::Request request;
        request.url = bot.base_url() + "/bot" + bot.token() + "/" + method;
        request.headers = {{"Content-Type", "application/json"}};
        request.body = params.dump();
        auto response = client.send(request);
        return response ? Json::parse(response->body, nullptr, false) : Json();
      };
      const std::int64_t chat = 5000 + i;
      for (int turn = 0; std::chrono::steady_clock::now() < end; ++turn) {
        const std::string answer =
            kernex::test::drip_answer(0, "turn " + std::to_string(turn), kAnswerLength);
        std::int64_t id = 0;
        for (std::size_t at = kChunk; at <= answer.size() + kChunk - 1; at += kChunk) {
          std::this_thread::sleep_for(kChunkDelay);  // the model's pace, not synchronisation
          const std::string shown = answer.substr(0, std::min(at, answer.size()));
          if (id == 0) {
            Json sent = call("sendMessage", {{"chat_id", chat}, {"text", shown}});
            if (sent.is_object() && sent.value("ok", false)) id = sent["result"]["message_id"];
          } else {
            call("editMessageText", {{"chat_id", chat}, {"message_id", id}, {"text", shown}});
          }
        }
      }
    });
  }
  for (auto& s : streams) s.join();
  return bot.stats();
}

}  // namespace

int main(int argc, char** argv) {
  const int seconds = argc > 1 ? std::atoi(argv[1]) : 60;
  const int chats = argc > 2 ? std::atoi(argv[2]) : 20;
  if (seconds <= 0 || chats <= 0) {
    std::cerr << "usage: telegram_chats [SECONDS>0] [CHATS>0]\n";
    return 2;
  }
  const auto base = baseline(chats, std::chrono::seconds(seconds));
  kernex::test::TelegramHarness h;
  if (auto r = h.start("allowed_users: [7]", "{length: 1500, chunk: 20, delay_ms: 40}"); !r) {
    std::cerr << r.error().describe() << "\n";
    return 1;
  }
  const auto f =
      kernex::test::run_chat_load(h, chats, std::chrono::seconds(seconds), kAnswerLength);
  (void)h.stop();
  std::cout << "chats=" << chats << " seconds=" << seconds << "\n"
            << "baseline (unpaced, edit per chunk): sends=" << base.sends << " edits=" << base.edits
            << " 429s=" << base.rate_limited << " early_retries=" << base.early_retries << "\n"
            << "channel-telegram: answers=" << f.answers_asked << " complete=" << f.answers_complete
            << " missing=" << f.answers_missing << " sends=" << f.bot.sends
            << " edits=" << f.bot.edits << " 429s=" << f.bot.rate_limited
            << " early_retries=" << f.bot.early_retries << " too_long=" << f.bot.too_long
            << " not_modified=" << f.bot.not_modified << "\n";
  const bool met = f.answers_missing == 0 && f.answers_complete == f.answers_asked &&
                   f.bot.rate_limited == 0 && f.bot.early_retries == 0;
  std::cout << (met ? "TARGET MET" : "TARGET MISSED") << "\n";
  return met ? 0 : 1;
}
