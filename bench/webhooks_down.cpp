// Webhooks to a receiver that is down, then up (issue 22's target: "receiver down 10 minutes,
// then up: 100 % of events delivered, each with a valid signature"). In this process: serve's
// run store and webhook sender (server/src) on a fresh serve.db, a loopback receiver that checks
// every signature (tests/support/webhook_receiver.hpp, HMAC recomputed with OpenSSL).
//   baseline  the same events with the receiver up all along: delivered, valid, time to the last.
//   down      the receiver refuses connections for --down-s seconds while the events are made,
//             spread over that time (runs ending: run.completed/run.failed, and approval events
//             published for them); with --restart the sender is stopped and started again half-way.
//             Then the receiver comes up on the same port: delivered, distinct ids, duplicates,
//             valid signatures, attempts made while down, time from up to the last delivery.
// Retries use the real default backoff (1 s doubling to 1 h, full jitter) unless
// --base-ms/--cap-ms. Usage: webhooks_down [--down-s 600] [--events 200] [--base-ms 1000] [--cap-ms
// 3600000]
//                      [--restart] [--wait-s 7200]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <tuple>

#include "run_store.hpp"
#include "webhook_outbox.hpp"
#include "webhook_receiver.hpp"
#include "webhook_sender.hpp"

namespace {

namespace fs = std::filesystem;
using namespace kernex::server;
using kernex::test::WebhookReceiver;
using Clock = std::chrono::steady_clock;

struct Options {
  long down_s = 600;
  int events = 200;
  long base_ms = 1000;
  long cap_ms = 3'600'000;
  long wait_s = 7200;
  bool restart = false;
};

struct Figures {
  std::size_t made = 0, delivered = 0, valid = 0, duplicates = 0;
  std::int64_t max_attempts = 0, failed_attempts = 0;
  double seconds_to_last = 0;
};

fs::path fresh_dir(const std::string& name) {
  std::string pattern = (fs::temp_directory_path() / ("kernex-webhooks-" + name + "-XXXXXX"));
  if (::mkdtemp(pattern.data()) == nullptr) std::abort();
  return pattern;
}

class World {
 public:
  World(const Options& o, WebhookReceiver& receiver, const std::string& name)
      : dir_(fresh_dir(name)), options_(o), receiver_(receiver) {
    store_ = std::move(*RunStore::open(dir_ / "serve.db"));
    start_sender();
  }
  ~World() {
    sender_.reset();
    store_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void start_sender() {
    WebhookEndpointConfig e;
    e.url = receiver_.url();
    e.secret = "whsec-bench";
    e.events = {"run.completed", "run.failed", "approval.requested", "approval.resolved"};
    e.backoff_base = std::chrono::milliseconds(options_.base_ms);
    e.backoff_cap = std::chrono::milliseconds(options_.cap_ms);
    e.timeout = std::chrono::milliseconds(5000);
    sender_ = std::move(*Webhooks::create({e}, dir_ / "serve.db"));
    store_->on_finish(sender_->finish_hook());
    sender_->start();
  }
  void restart_sender() {
    sender_.reset();
    start_sender();
  }
  // Event i: every 4th is an approval.requested, the next its approval.resolved, the two after
  // the run's end (done or failed): the shapes a real server makes, two streams of order.
  void make(int i) {
    if (i % 4 == 0) {
      run_ = "run_bench_" + std::to_string(i);
      RunState run(run_, "acme", "s" + std::to_string(i % 7), "2026-01-01 00:00:00");
      (void)store_->insert(run, kernex::Json{{"message", "m"}});
      (void)sender_->publish("approval.requested", "acme", {{"run_id", run_}, {"tool", "bash"}});
    } else if (i % 4 == 1) {
      (void)sender_->publish("approval.resolved", "acme",
                             {{"run_id", run_}, {"decision", "approve"}});
    } else if (i % 4 == 2) {
      (void)store_->finish(run_, i % 8 == 2 ? RunStatus::Failed : RunStatus::Done,
                           {{"run_id", run_}, {"outcome", "end_turn"}, {"text", "ok"}}, {});
      store_->announce_end();  // as RunManager does once the run has ended in memory
    } else {
      (void)sender_->publish("approval.requested", "acme",
                             {{"run_id", "lone_" + std::to_string(i)}, {"tool", "web_fetch"}});
    }
  }
  // The most attempts one event took, and all attempts that failed (refused while down).
  std::pair<std::int64_t, std::int64_t> attempts() {
    auto outbox = WebhookOutbox::open(dir_ / "serve.db");
    std::int64_t most = 0, failed = 0;
    auto rows = (*outbox)->list(false, 1'000'000);
    for (const auto& r : *rows) {
      most = std::max(most, r.attempts);
      failed += r.attempts - (r.status == "delivered" ? 1 : 0);
    }
    return {most, failed};
  }

 private:
  fs::path dir_;
  Options options_;
  WebhookReceiver& receiver_;
  std::unique_ptr<RunStore> store_;
  std::unique_ptr<Webhooks> sender_;
  std::string run_;
};

Figures measure(const Options& o, bool down) {
  WebhookReceiver receiver("whsec-bench");
  receiver.up();
  if (down) receiver.down();
  Figures f;
  {
    World world(o, receiver, down ? "down" : "baseline");
    const auto start = Clock::now();
    for (int i = 0; i < o.events; ++i) {
      world.make(i);
      if (down && o.restart && i == o.events / 2) world.restart_sender();
      if (down)
        std::this_thread::sleep_until(start + std::chrono::milliseconds(o.down_s * 1000) * (i + 1) /
                                                  o.events);
    }
    f.made = static_cast<std::size_t>(o.events);
    const auto up = Clock::now();
    if (down) receiver.up();
    receiver.wait_distinct(f.made, std::chrono::seconds(o.wait_s));
    f.seconds_to_last = std::chrono::duration<double>(Clock::now() - up).count();
    std::tie(f.max_attempts, f.failed_attempts) = world.attempts();
  }
  for (const auto& d : receiver.accepted()) f.valid += d.signature_valid;
  f.delivered = receiver.distinct();
  f.duplicates = receiver.duplicates();
  return f;
}

void print(const char* phase, const Figures& f) {
  std::printf(
      "%-8s events %zu delivered %zu (%.1f %%) valid signatures %zu duplicates %zu "
      "failed attempts %lld max attempts per event %lld last delivery %.2f s after "
      "up\n",
      phase, f.made, f.delivered, f.made ? 100.0 * f.delivered / f.made : 0.0, f.valid,
      f.duplicates, static_cast<long long>(f.failed_attempts),
      static_cast<long long>(f.max_attempts), f.seconds_to_last);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atol(argv[++i]) : 0L; };
    if (a == "--down-s")
      o.down_s = next();
    else if (a == "--events")
      o.events = static_cast<int>(next());
    else if (a == "--base-ms")
      o.base_ms = next();
    else if (a == "--cap-ms")
      o.cap_ms = next();
    else if (a == "--wait-s")
      o.wait_s = next();
    else if (a == "--restart")
      o.restart = true;
    else {
      std::fprintf(stderr,
                   "usage: webhooks_down [--down-s S] [--events N] [--base-ms MS] "
                   "[--cap-ms MS] [--wait-s S] [--restart]\n");
      return 2;
    }
  }
  if (o.events < 4 || o.down_s < 0 || o.base_ms <= 0 || o.cap_ms < o.base_ms) return 2;
  std::printf("webhooks_down: %d events over %ld s down, backoff %ld ms .. %ld ms%s\n", o.events,
              o.down_s, o.base_ms, o.cap_ms, o.restart ? ", sender restarted half-way" : "");
  print("baseline", measure(o, false));
  const Figures f = measure(o, true);
  print("down", f);
  const bool ok = f.delivered == f.made && f.valid == f.delivered;
  std::printf("target (100 %% delivered, each with a valid signature): %s\n",
              ok ? "met" : "MISSED");
  return ok ? 0 : 1;
}
