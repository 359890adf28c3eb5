// A provider that says which instance answered, for the provider pool's suites: its answer is
// "instance=<serial> calls=<n> key=<api_key>", streamed in three pieces, where <serial> counts
// the factory's calls in this process, <n> the instance's calls and <api_key> is the option the
// instance was made with. Between pieces a stop request makes the call fail, as an aborted HTTP
// request does. Option `barrier` (a count): each group of that many calls waits until
// all of it has arrived (at most 20 s), so concurrent runs are all in flight together. An instance
// that finds another call inside it adds " [shared instance]".
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "kernex/plugin.hpp"

namespace {

std::atomic<int> made{0};
std::mutex inside_mutex;
std::condition_variable inside_changed;
int arrived = 0;  // calls that reached the barrier, ever: each `barrier` of them pass together

class SerialProvider final : public kernex::Provider {
 public:
  SerialProvider(int serial, std::string key, int barrier)
      : serial_(serial), key_(std::move(key)), barrier_(barrier) {}
  std::string name() const override { return "serial"; }
  std::string default_model() const override { return "serial-1"; }
  kernex::Result<kernex::Response> complete(const kernex::Context& context,
                                            const std::vector<kernex::ToolSpec>&,
                                            const kernex::StreamSink& sink) override {
    bool shared = inside_++ > 0;
    const int call = ++calls_;
    bool gathered = wait_for_barrier();
    kernex::Response r;
    r.model = "serial-1";
    r.provider = "serial";
    r.stop_reason = "end_turn";
    for (const std::string& piece : {"instance=" + std::to_string(serial_),
                                     " calls=" + std::to_string(call), " key=" + key_}) {
      if (sink)
        sink(kernex::StreamEvent{
            kernex::StreamEvent::Kind::TextDelta, piece, {}, {}, {}, {}, false});
      r.text += piece;
      shared = shared || inside_ > 1;
      if (context.stop.stop_requested()) {
        leave();
        return kernex::fail(kernex::ErrorCode::Provider, "serial: request aborted");
      }
    }
    leave();
    if (shared) r.text += " [shared instance]";
    if (!gathered) r.text += " [barrier timeout]";
    if (sink) sink(kernex::StreamEvent{kernex::StreamEvent::Kind::Done, {}, {}, {}, {}, {}, false});
    return r;
  }

 private:
  bool wait_for_barrier() {
    if (barrier_ <= 0) return true;
    std::unique_lock lock(inside_mutex);
    const int wave_end = (arrived / barrier_ + 1) * barrier_;
    ++arrived;
    inside_changed.notify_all();
    return inside_changed.wait_for(lock, std::chrono::seconds(20),
                                   [&] { return arrived >= wave_end; });
  }
  void leave() { --inside_; }

  int serial_;
  std::string key_;
  int barrier_;
  int calls_ = 0;
  std::atomic<int> inside_{0};
};

kernex::Result<std::shared_ptr<kernex::Provider>> make_serial(const kernex::Json& config) {
  if (!config.is_object())
    return kernex::fail(kernex::ErrorCode::Config, "serial: config must be an object");
  std::string key = config.value("api_key", std::string());
  int barrier = config.value("barrier", 0);
  return std::make_shared<SerialProvider>(++made, std::move(key), barrier);
}

}  // namespace

KERNEX_PLUGIN(Provider, "serial", "1.0.0", "Says which instance answered (provider pool tests)",
              make_serial)
