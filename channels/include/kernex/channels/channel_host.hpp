// The host side of channel plugins: a ChannelHost that runs each turn on a Kernel, and the
// runners `kernex channel run` and `kernex serve` start channels with.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "kernex/channel.hpp"
#include "kernex/config.hpp"
#include "kernex/kernel.hpp"

namespace kernex::channels {

// Runs turns of one configured channel on `kernel`. Each session is its own conversation in memory
// ({"channel/<name>", session, project}) and its own workspace
// (<data_dir>/channel-workspaces/<name>/<session>); turns of one session run one at a time.
// state_dir() is <data_dir>/channels/<name>, registered as a hidden kernel file.
class KernelChannelHost final : public ChannelHost {
 public:
  KernelChannelHost(Kernel& kernel, std::string name);

  Result<ChannelReply> run(const ChannelTurn& turn) override;
  Result<std::vector<ContextEntry>> history(const std::string& session, std::size_t limit) override;
  std::filesystem::path state_dir() override;
  Result<std::filesystem::path> attachments_dir(const std::string& session) override;
  std::optional<std::string> env(const std::string& name) override;

  // Where `session`'s tools work (created); an error for a session name unfit for a path.
  Result<std::filesystem::path> workspace(const std::string& session);
  ConversationKey conversation(const std::string& session) const;

 private:
  std::shared_ptr<std::mutex> session_lock(const std::string& session);

  Kernel& kernel_;
  std::string name_;
  std::filesystem::path state_dir_;
  std::filesystem::path workspaces_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<std::mutex>> sessions_;
};

// Creates the configured channel `ref` and runs it until `stop` (Channel::run's result).
Result<void> run_channel(Kernel& kernel, const PluginRef& ref, std::stop_token stop);

// Every configured channel, each on its own thread; stop() (or the destructor) asks them all to
// stop and waits. A channel that fails is logged; the others go on.
class ChannelSet {
 public:
  explicit ChannelSet(Kernel& kernel);
  ~ChannelSet();
  ChannelSet(const ChannelSet&) = delete;
  ChannelSet& operator=(const ChannelSet&) = delete;
  std::size_t size() const { return threads_.size(); }
  void stop();

 private:
  std::vector<std::jthread> threads_;
};

}  // namespace kernex::channels
