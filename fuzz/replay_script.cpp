// The replay provider's script (JSON Lines), loaded as the kernel loads the plugin: the input is
// written to a script file, a provider is made from it (every line parsed), then asked three
// times, so matching, streaming and "no response left" run too. A line's delay_ms is cut short
// by the run's stop token, which a watchdog fires after a few milliseconds.
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>

#include "fuzz.hpp"
#include "kernex/plugin_host.hpp"
#include "skill_files.hpp"

KERNEX_FUZZ_TARGET(replay_script) {
  static kernex::PluginHost host = [] {
    kernex::PluginHost h;
    if (!h.add_file(std::string(KERNEX_PLUGIN_BUILD_DIR) + "/libkernex-provider-replay.so"))
      throw std::runtime_error("cannot load the replay provider");
    return h;
  }();
  static const kernex::fuzz::ScratchSkill scratch("replay");
  scratch.write("script.jsonl", kernex::fuzz::text(data, size));
  const std::string script = (scratch.folder() / "script.jsonl").string();
  auto provider = host.create_provider("replay", kernex::Json{{"script", script}});
  if (!provider) {
    (void)provider.error().describe();
    return 0;
  }
  std::stop_source stop;
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::jthread watchdog([&] {
    std::unique_lock lock(mutex);
    if (!done_cv.wait_for(lock, std::chrono::milliseconds(5), [&] { return done; }))
      stop.request_stop();
  });
  for (const char* message : {"hello", "second question", ""}) {
    kernex::Context context(message);
    context.stop = stop.get_token();
    auto r = (*provider)->complete(context, {}, [](const kernex::StreamEvent&) {});
    if (r)
      (void)kernex::Json(*r).dump();
    else
      (void)r.error().describe();
  }
  {
    std::lock_guard lock(mutex);
    done = true;
  }
  done_cv.notify_one();
  return 0;
}
