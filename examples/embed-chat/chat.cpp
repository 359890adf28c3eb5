// A host that embeds the kernel: one streaming chat turn in a session; Ctrl-C cancels it.
//   KERNEX_CONFIG=kernex.yaml embed-chat SESSION MESSAGE
#include <pthread.h>
#include <csignal>
#include <iostream>
#include <thread>

#include "kernex/kernel.hpp"

int main(int argc, char** argv) {
  if (argc != 3) return std::cerr << "usage: embed-chat SESSION MESSAGE  (Ctrl-C cancels)\n", 2;
  auto config = kernex::Config::load(std::nullopt);  // $KERNEX_CONFIG, else the defaults
  if (!config) return std::cerr << config.error().describe() << '\n', 1;
  auto kernel = kernex::Kernel::create(std::move(*config));
  if (!kernel) return std::cerr << kernel.error().describe() << '\n', 1;
  std::stop_source stop;
  sigset_t sigint;
  sigemptyset(&sigint), sigaddset(&sigint, SIGINT), pthread_sigmask(SIG_BLOCK, &sigint, nullptr);
  std::thread([&] {
    int s;
    sigwait(&sigint, &s), stop.request_stop();
  }).detach();
  kernex::RunOptions options;
  options.stop = stop.get_token();
  options.conversation =
      kernex::ConversationKey{"embed-chat", argv[1], ""};  // the session's history
  options.sink = [](const kernex::StreamEvent& e) {
    if (e.kind == kernex::StreamEvent::Kind::TextDelta) std::cout << e.text << std::flush;
  };
  auto result = (*kernel)->run(kernex::Request::from_text(argv[1], argv[2]), options);
  if (!result) return std::cerr << result.error().describe() << '\n', 1;
  std::cout << "\n[" << kernex::to_string(result->outcome) << "]\n";
}
