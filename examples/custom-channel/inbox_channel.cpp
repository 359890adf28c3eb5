// An out-of-tree channel plugin: a "chat network" made of two directories. Each file dropped in
// `inbox` is a message (its name, up to the first '.', names the session, so `alice.1.txt` and
// `alice.2.txt` are one conversation); the answer is written to `outbox` under the same name and
// the message file removed. With `stop_when_idle: true` it returns once the inbox is empty. A
// template to copy: replace the directory scan with your network's API.
#include <kernex/plugin.hpp>

#include <algorithm>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct InboxOptions {
  fs::path inbox, outbox;
  bool stop_when_idle = false;
};

class InboxChannel final : public kernex::Channel {
 public:
  explicit InboxChannel(InboxOptions options) : options_(std::move(options)) {}

  kernex::Result<void> run(kernex::ChannelHost& host, std::stop_token stop) override {
    std::error_code ec;
    fs::create_directories(options_.outbox, ec);
    while (!stop.stop_requested()) {
      std::vector<fs::path> messages;
      for (const auto& entry : fs::directory_iterator(options_.inbox, ec))
        if (entry.is_regular_file()) messages.push_back(entry.path());
      if (ec)
        return kernex::fail(kernex::ErrorCode::Io, "inbox: cannot read " + options_.inbox.string());
      std::sort(messages.begin(), messages.end());
      if (messages.empty() && options_.stop_when_idle) return {};
      for (const auto& file : messages) {
        if (auto r = answer(host, file, stop); !r) return r;
      }
      // Nothing new: look again in a moment (a real network would block on its API instead).
      std::mutex mutex;
      std::condition_variable_any wake;
      std::unique_lock lock(mutex);
      wake.wait_for(lock, stop, std::chrono::milliseconds(500), [] { return false; });
    }
    return {};
  }

 private:
  kernex::Result<void> answer(kernex::ChannelHost& host, const fs::path& file,
                              std::stop_token stop) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    kernex::ChannelTurn turn;
    const std::string name = file.filename().string();
    turn.session = "inbox:" + name.substr(0, name.find('.'));
    turn.sender = "inbox";
    turn.text = text.str();
    turn.stop = stop;
    // No approver: calls that need one are denied, as with any channel that cannot ask.
    auto reply = host.run(turn);
    std::ofstream out(options_.outbox / name);
    out << (reply ? reply->text : "error: " + reply.error().message) << "\n";
    std::error_code ec;
    fs::remove(file, ec);
    // The channel's own durable state goes to state_dir, which no tool can write.
    std::ofstream(host.state_dir() / "handled", std::ios::app) << name << "\n";
    return {};
  }

  InboxOptions options_;
};

kernex::Result<std::shared_ptr<kernex::Channel>> make_inbox(const kernex::Json& config) {
  InboxOptions o;
  for (const auto& [key, value] : config.items()) {
    if ((key == "inbox" || key == "outbox") && value.is_string())
      (key == "inbox" ? o.inbox : o.outbox) = value.get<std::string>();
    else if (key == "stop_when_idle" && value.is_boolean())
      o.stop_when_idle = value.get<bool>();
    else
      return kernex::fail(kernex::ErrorCode::Config,
                          "inbox: unknown or mistyped option '" + key +
                              "' (expected inbox, outbox: paths; stop_when_idle: true|false)");
  }
  if (o.inbox.empty() || o.outbox.empty())
    return kernex::fail(kernex::ErrorCode::Config, "inbox: options inbox and outbox are required");
  return std::make_shared<InboxChannel>(std::move(o));
}

}  // namespace

KERNEX_PLUGIN(Channel, "inbox", "1.0.0", "Messages as files in a directory, answers in another",
              make_inbox)
