// `kernex chat`: the terminal channel on a local kernel. Signals are taken by one thread
// (sigwait), so Ctrl-C reaches the channel as "stop this turn" instead of ending the program.
#include <pthread.h>

#include <csignal>
#include <iostream>
#include <thread>

#include "commands.hpp"
#include "kernex/channels/channel_host.hpp"
#include "kernex/kernel.hpp"
#include "provider_opt.hpp"
#include "terminal_channel.hpp"

namespace kernex::cli {
namespace {

struct ChatArgs {
  std::optional<std::string> provider;
  std::optional<std::string> data_dir;
  std::vector<std::string> provider_opts;
};

sigset_t chat_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGUSR1);  // sent by the program itself: the chat ended
  return set;
}

// Ctrl-C stops the running turn; SIGTERM or SIGHUP end the chat; SIGUSR1 ends this thread.
void take_signals(TerminalChannel& channel, std::stop_source& program) {
  const sigset_t set = chat_signals();
  while (true) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0 || sig == SIGUSR1) return;
    if (sig == SIGINT) {
      if (!channel.interrupt_turn())
        std::cerr << "\n(nothing is running: /quit or Ctrl-D leaves)\nyou> " << std::flush;
      continue;
    }
    channel.interrupt_turn();
    program.request_stop();
    return;
  }
}

Result<std::unique_ptr<Kernel>> chat_kernel(const ConfigFile& config_file, const ChatArgs& args) {
  KERNEX_ASSIGN_OR_RETURN(
      auto config, Config::load(config_file ? std::optional<std::filesystem::path>(*config_file)
                                            : std::nullopt));
  if (args.data_dir) config.data_dir = absolute_path(*args.data_dir);
  if (args.provider) config.provider = PluginRef{*args.provider, Json::object()};
  for (const auto& raw : args.provider_opts) {
    KERNEX_ASSIGN_OR_RETURN(auto kv, parse_provider_opt(raw));
    config.provider.config[kv.first] = std::move(kv.second);
  }
  if (config.provider.name.empty()) {
    return fail(ErrorCode::Config,
                "no provider configured: pass --provider NAME, or set `provider:` in kernex.yaml");
  }
  return Kernel::create(std::move(config));
}

int chat(const ConfigFile& config_file, const ChatArgs& args) {
  // Before any thread exists, so every thread inherits the mask and only sigwait sees them.
  const sigset_t set = chat_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto kernel = chat_kernel(config_file, args);
  if (!kernel) return report(kernel.error());
  TerminalChannel channel;
  std::stop_source program;
  std::thread signals(take_signals, std::ref(channel), std::ref(program));
  channels::KernelChannelHost host(**kernel, "terminal");
  auto ended = channel.run(host, program.get_token());
  pthread_kill(signals.native_handle(), SIGUSR1);
  signals.join();
  return ended ? 0 : report(ended.error());
}

}  // namespace

CommandRun setup_chat(Command command, std::string&) {
  auto args = std::make_shared<ChatArgs>();
  command.add_option("--provider", args->provider, "provider plugin (overrides `provider:`)")
      .type_name("NAME");
  command.add_option("--data-dir", args->data_dir, "data directory (overrides data_dir)")
      .type_name("DIR");
  add_repeated(command, "--provider-opt", args->provider_opts,
               "provider option (repeatable); VALUE is JSON if it parses, else a string")
      .type_name("KEY=VALUE");
  return [args](const ConfigFile& config) { return chat(config, *args); };
}

}  // namespace kernex::cli
