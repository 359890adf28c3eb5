// Starting configured channels: one alone (`kernex channel run`) or all beside a server.
#include "kernex/channels/channel_host.hpp"
#include "kernex/log.hpp"

namespace kernex::channels {

Result<void> run_channel(Kernel& kernel, const PluginRef& ref, std::stop_token stop) {
  KERNEX_ASSIGN_OR_RETURN(auto channel, kernel.plugins().create_channel(ref.name, ref.config));
  KernelChannelHost host(kernel, ref.name);
  log(LogLevel::Info, "channel " + ref.name + " started");
  auto result = channel->run(host, stop);
  log(LogLevel::Info, "channel " + ref.name + " stopped");
  return result;
}

ChannelSet::ChannelSet(Kernel& kernel) {
  for (const auto& ref : kernel.config().channels) {
    threads_.emplace_back([&kernel, ref](std::stop_token stop) {
      if (auto r = run_channel(kernel, ref, stop); !r)
        log(LogLevel::Error, "channel " + ref.name + ": " + r.error().describe());
    });
  }
}

ChannelSet::~ChannelSet() { stop(); }

void ChannelSet::stop() {
  for (auto& t : threads_) t.request_stop();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

}  // namespace kernex::channels
