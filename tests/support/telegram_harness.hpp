// The Telegram channel in this process against a FakeBotApi: a kernel configured with the drip
// provider, the channel run on a thread of its own, stopped and started again at will (the state
// dir stays, as across a restart). Used by tests/channels and bench/telegram_chats.cpp.
#pragma once

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "fake_bot_api.hpp"
#include "kernex/channels/channel_host.hpp"
#include "kernex/kernel.hpp"
#include "temp_dir.hpp"

namespace kernex::test {

inline constexpr const char* kTokenEnv = "KERNEX_TEST_TELEGRAM_TOKEN";

// What the drip provider answers to `message` with `history` earlier entries (its formula).
inline std::string drip_answer(std::size_t history, const std::string& message, std::size_t length,
                               const std::string& tool_said = "") {
  std::string text = tool_said.empty() ? "" : "tool said: " + tool_said + "\n";
  text += "echo(" + std::to_string(history) + "): " + message + "\n";
  for (int line = 1; text.size() < length; ++line)
    text += "line " + std::to_string(line) + " of a long streamed answer\n";
  return text;
}

class TelegramHarness {
 public:
  TelegramHarness() : bot_(FakeBotApi::Options{}) { ::setenv(kTokenEnv, bot_.token().c_str(), 1); }
  ~TelegramHarness() { stop(); }

  // `channel_options` and `extra_yaml` are YAML flow/block text merged into the config.
  Result<void> start(const std::string& channel_options, const std::string& drip_options,
                     const std::string& extra_yaml = "toolboxes: []\n") {
    const std::string yaml = "data_dir: " + (dir_.path() / "data").string() +
                             "\nplugin_dirs: [" KERNEX_KERNEL_TEST_PLUGIN_DIR
                             "]\n"
                             "trajectories: false\n"
                             "pricing_file: " KERNEX_SOURCE_DIR
                             "/data/pricing.yaml\n"
                             "provider: {name: drip, options: " +
                             drip_options + "}\n" + extra_yaml +
                             "channels:\n  - name: telegram\n    options: {base_url: '" +
                             bot_.base_url() + "', token_env: " + kTokenEnv +
                             ", poll_timeout_s: 1, " + channel_options + "}\n";
    KERNEX_ASSIGN_OR_RETURN(auto config, Config::parse_yaml(yaml, "telegram-test.yaml"));
    KERNEX_ASSIGN_OR_RETURN(kernel_, Kernel::create(std::move(config)));
    result_.reset();
    thread_ = std::jthread([this](std::stop_token stop) {
      result_ = channels::run_channel(*kernel_, kernel_->config().channels.at(0), stop);
    });
    return {};
  }

  // Stops the channel and returns what its run returned.
  Result<void> stop() {
    if (thread_.joinable()) {
      thread_.request_stop();
      thread_.join();
    }
    kernel_.reset();
    return result_.value_or(Result<void>{});
  }

  FakeBotApi& bot() { return bot_; }
  const std::filesystem::path& dir() const { return dir_.path(); }

  // Waits until the bot's messages in `chat` after message `after` read `text`.
  bool wait_for_text(std::int64_t chat, const std::string& text, std::int64_t after = 0,
                     std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    return bot_.wait_until([&] { return joined_texts(bot_.messages(chat), after) == text; },
                           timeout);
  }
  // The id of the newest message in `chat` (the bot's or a person's), 0 when none.
  std::int64_t last_id(std::int64_t chat) {
    auto list = bot_.messages(chat);
    return list.empty() ? 0 : list.back().id;
  }

 private:
  kernex::testing::TempDir dir_;
  FakeBotApi bot_;
  std::unique_ptr<Kernel> kernel_;
  std::optional<Result<void>> result_;
  std::jthread thread_;
};

}  // namespace kernex::test
