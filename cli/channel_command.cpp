// `kernex channel run NAME`: one configured channel (kernex.yaml `channels:`) until SIGINT or
// SIGTERM. `kernex serve` runs every configured channel beside the server.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <memory>
#include <thread>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "kernex/channels/channel_host.hpp"
#include "kernex/kernel.hpp"

namespace kernex::cli {
namespace {

struct ChannelArgs {
  std::string name;
  std::optional<std::string> data_dir;
};

int run_channel(const ConfigFile& file, const ChannelArgs& args) {
  // Blocked before any thread starts, so only the waiter below takes them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  auto config = load_config_with(file, args.data_dir);
  if (!config) return report(config.error());
  const PluginRef* ref = nullptr;
  for (const auto& c : config->channels)
    if (c.name == args.name) ref = &c;
  if (ref == nullptr)
    return report(Error{ErrorCode::Config,
                        "no channel `" + args.name + "` in the config's `channels:` list"});
  const PluginRef channel = *ref;
  auto kernel = Kernel::create(std::move(*config));
  if (!kernel) return report(kernel.error());
  std::stop_source stop;
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    int signal = 0;
    sigwait(&signals, &signal);
    if (!done) stop.request_stop();
  });
  auto result = channels::run_channel(**kernel, channel, stop.get_token());
  done = true;
  pthread_kill(waiter.native_handle(), SIGTERM);  // blocked: ends the waiter's sigwait
  waiter.join();
  if (!result) return report(result.error());
  return kExitOk;
}

}  // namespace

CommandRun setup_channel(Command command, std::string& config) {
  auto args = std::make_shared<ChannelArgs>();
  command.require_subcommand();
  Command run = command.add_subcommand("run", "Run one configured channel until Ctrl-C");
  add_config_option(run, config);
  run.add_option("NAME", args->name, "the channel's name in `channels:`").required();
  run.add_option("--data-dir", args->data_dir, "where memory, state and workspaces live")
      .type_name("DIR");
  return [args](const ConfigFile& file) { return run_channel(file, *args); };
}

}  // namespace kernex::cli
