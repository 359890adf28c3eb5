// Provider instances leased to runs: the pool alone (kernel/src/provider_pool.hpp) with providers
// of this file, then through the Kernel with the `serial` test provider, which says which instance
// answered and how many calls it has had.
#include "provider_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <set>
#include <stop_token>
#include <thread>

#include "kernex/kernel.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

// Knows the options it was made with and notices a second caller inside it.
class Probe final : public Provider {
 public:
  explicit Probe(Json options) : options_(std::move(options)) {}
  std::string name() const override { return "probe"; }
  Result<Response> complete(const Context&, const std::vector<ToolSpec>&,
                            const StreamSink&) override {
    return Response{};
  }
  bool enter() { return inside_.exchange(true) == false; }
  void leave() { inside_ = false; }
  const Json& options() const { return options_; }

 private:
  Json options_;
  std::atomic<bool> inside_{false};
};

// Twins share one counter, as replay twins share one script.
class Twinning final : public Provider {
 public:
  explicit Twinning(std::shared_ptr<std::atomic<int>> shared) : shared_(std::move(shared)) {}
  std::string name() const override { return "twinning"; }
  Result<Response> complete(const Context&, const std::vector<ToolSpec>&,
                            const StreamSink&) override {
    Response r;
    r.text = std::to_string(++*shared_);
    return r;
  }
  std::shared_ptr<Provider> concurrent_instance() override {
    return std::make_shared<Twinning>(shared_);
  }

 private:
  std::shared_ptr<std::atomic<int>> shared_;
};

struct Counting {
  std::atomic<int> calls{0};
  ProviderPool::Factory factory() {
    return
        [this](const std::string& name, const Json& options) -> Result<std::shared_ptr<Provider>> {
          ++calls;
          if (name == "twinning")
            return std::make_shared<Twinning>(std::make_shared<std::atomic<int>>(0));
          if (name == "broken") return fail(ErrorCode::Config, "broken: no such thing");
          return std::make_shared<Probe>(options);
        };
  }
};

ProviderPoolLimits on(std::size_t idle = 16, std::size_t keys = 32) {
  ProviderPoolLimits limits;
  limits.max_idle_per_key = idle;
  limits.max_keys = keys;
  limits.enabled = true;
  return limits;
}

TEST(ProviderPool, ReusesAnInstanceAcrossSequentialLeases) {
  Counting count;
  ProviderPool pool(count.factory(), on());
  Provider* first = nullptr;
  for (int i = 0; i < 5; ++i) {
    auto lease = pool.lease("probe", Json{{"model", "m"}});
    ASSERT_TRUE(lease) << lease.error().describe();
    if (first == nullptr) first = lease->get();
    EXPECT_EQ(lease->get(), first);
  }
  EXPECT_EQ(count.calls, 1);
  EXPECT_EQ(pool.stats().created, 1u);
  EXPECT_EQ(pool.stats().reused, 4u);
  EXPECT_EQ(pool.stats().idle, 1u);
}

TEST(ProviderPool, LeasesHeldAtOnceAreDistinct) {
  Counting count;
  ProviderPool pool(count.factory(), on());
  std::vector<std::shared_ptr<Provider>> held;
  std::set<Provider*> seen;
  for (int i = 0; i < 6; ++i) {
    held.push_back(pool.lease("probe", Json::object()).value());
    seen.insert(held.back().get());
  }
  EXPECT_EQ(seen.size(), 6u);
  held.clear();
  EXPECT_EQ(pool.stats().idle, 6u);
}

// Threads lease, use and give back as fast as they can: no instance ever has two users.
TEST(ProviderPool, ConcurrentLeasesNeverShareAnInstance) {
  Counting count;
  ProviderPool pool(count.factory(), on(4));
  std::atomic<int> shared{0};
  constexpr int kThreads = 8;
  std::barrier start(kThreads);
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        start.arrive_and_wait();
        for (int i = 0; i < 300; ++i) {
          auto lease = pool.lease("probe", Json::object());
          if (!lease) {
            ++shared;
            continue;
          }
          auto& probe = static_cast<Probe&>(**lease);
          if (!probe.enter()) {
            ++shared;
            continue;
          }
          std::this_thread::yield();
          probe.leave();
        }
      });
    }
  }
  EXPECT_EQ(shared, 0);
  const auto stats = pool.stats();
  EXPECT_LE(stats.created, static_cast<std::uint64_t>(kThreads) + stats.dropped);
  EXPECT_LE(stats.idle, 4u);  // the cap
}

TEST(ProviderPool, DifferentOptionsOrNamesNeverShare) {
  Counting count;
  ProviderPool pool(count.factory(), on());
  const Json a{{"api_key", "tenant-a"}}, b{{"api_key", "tenant-b"}};
  { auto lease = pool.lease("probe", a).value(); }
  auto other = pool.lease("probe", b).value();
  EXPECT_EQ(static_cast<Probe&>(*other).options(), b);
  auto again = pool.lease("probe", a).value();
  EXPECT_EQ(static_cast<Probe&>(*again).options(), a);
  EXPECT_NE(other.get(), again.get());
  // Same options under another provider name, and names that run into the options.
  auto named = pool.lease("probe2", a).value();
  EXPECT_NE(named.get(), again.get());
  EXPECT_EQ(count.calls, 3);
}

// Options whose strings are not valid UTF-8 (a tenant's bytes) neither throw nor fold into one
// key, and a number is not its string.
TEST(ProviderPool, KeysKeepEveryByteAndType) {
  Counting count;
  ProviderPool pool(count.factory(), on());
  const std::vector<Json> options = {Json{{"api_key", "\xff\xfe"}},
                                     Json{{"api_key", "\xff\xfd"}},
                                     Json{{"api_key", "\xef\xbf\xbd"}},
                                     Json{{"n", 1}},
                                     Json{{"n", "1"}},
                                     Json{{"n", 1.0}},
                                     Json::object()};
  std::vector<std::shared_ptr<Provider>> held;
  for (const auto& o : options) {
    { auto first = pool.lease("probe", o).value(); }
    held.push_back(pool.lease("probe", o).value());
    EXPECT_EQ(static_cast<Probe&>(*held.back()).options(), o);
  }
  EXPECT_EQ(count.calls, static_cast<int>(options.size()));
}

TEST(ProviderPool, ADiscardedLeaseIsNotReused) {
  Counting count;
  ProviderPool pool(count.factory(), on());
  Provider* before = nullptr;
  {
    auto lease = pool.lease("probe", Json::object()).value();
    before = lease.get();
    auto copy = lease;
    ProviderPool::discard(copy);
  }
  EXPECT_EQ(pool.stats().idle, 0u);
  EXPECT_EQ(pool.stats().dropped, 1u);
  auto next = pool.lease("probe", Json::object()).value();
  EXPECT_EQ(count.calls, 2);
  (void)before;
  // Not a lease: nothing happens.
  ProviderPool::discard(std::make_shared<Probe>(Json::object()));
}

TEST(ProviderPool, IdleInstancesPerKeyAreCapped) {
  Counting count;
  ProviderPool pool(count.factory(), on(2));
  {
    std::vector<std::shared_ptr<Provider>> held;
    for (int i = 0; i < 5; ++i) held.push_back(pool.lease("probe", Json::object()).value());
  }
  EXPECT_EQ(pool.stats().idle, 2u);
  EXPECT_EQ(pool.stats().dropped, 3u);
}

// Past max_keys the least recently used key goes, with its idle instances; a lease of it still
// out is dropped when given back, and the key's next lease makes a new instance.
TEST(ProviderPool, TheLeastRecentlyUsedKeyIsEvicted) {
  Counting count;
  ProviderPool pool(count.factory(), on(16, 2));
  auto held_a = pool.lease("probe", Json{{"k", "a"}}).value();
  { auto b = pool.lease("probe", Json{{"k", "b"}}).value(); }
  { auto c = pool.lease("probe", Json{{"k", "c"}}).value(); }  // evicts a (least recent)
  EXPECT_EQ(pool.stats().keys, 2u);
  EXPECT_EQ(pool.stats().evicted, 1u);
  held_a.reset();
  EXPECT_EQ(pool.stats().idle, 2u);                            // b and c; a's instance was dropped
  { auto b = pool.lease("probe", Json{{"k", "b"}}).value(); }  // reused, now most recent
  EXPECT_EQ(count.calls, 3);
  { auto a = pool.lease("probe", Json{{"k", "a"}}).value(); }  // evicts c
  EXPECT_EQ(count.calls, 4);
  { auto b = pool.lease("probe", Json{{"k", "b"}}).value(); }
  EXPECT_EQ(count.calls, 4);
}

TEST(ProviderPool, TwinsComeFromTheFirstInstanceAndShareItsState) {
  Counting count;
  ProviderPool pool(count.factory(), on());
  auto one = pool.lease("twinning", Json::object()).value();
  auto two = pool.lease("twinning", Json::object()).value();
  EXPECT_NE(one.get(), two.get());
  EXPECT_EQ(one->complete(Context("x"), {}, {})->text, "1");
  EXPECT_EQ(two->complete(Context("x"), {}, {})->text, "2");
  EXPECT_EQ(count.calls, 1);  // one factory call: the template, never leased itself
  EXPECT_EQ(pool.stats().twinned, 2u);
}

TEST(ProviderPool, AFactoryErrorIsReturnedAndNothingIsKept) {
  Counting count;
  ProviderPool pool(count.factory(), on());
  for (int i = 0; i < 2; ++i) {
    auto lease = pool.lease("broken", Json::object());
    ASSERT_FALSE(lease);
    EXPECT_EQ(lease.error().code, ErrorCode::Config);
  }
  EXPECT_EQ(count.calls, 2);
  EXPECT_EQ(pool.stats().idle, 0u);
}

TEST(ProviderPool, OffMakesAnInstancePerLease) {
  Counting count;
  ProviderPoolLimits off = on();
  off.enabled = false;
  ProviderPool pool(count.factory(), off);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool.lease("probe", Json::object()));
  EXPECT_EQ(count.calls, 3);
  EXPECT_EQ(pool.stats().idle, 0u);
}

TEST(ProviderPool, ALeaseMayOutliveThePool) {
  Counting count;
  std::shared_ptr<Provider> kept;
  {
    ProviderPool pool(count.factory(), on());
    kept = pool.lease("probe", Json::object()).value();
  }
  EXPECT_EQ(kept->name(), "probe");
  kept.reset();  // destroyed, not returned (ASan sees any use after free)
}

// ---- through the Kernel ----------------------------------------------------------------------

class KernelProviderPool : public ::testing::Test {
 protected:
  std::unique_ptr<Kernel> kernel(Json options = Json::object()) {
    Config config;
    config.provider.name = "serial";
    config.provider.config = std::move(options);
    config.plugin_dirs = {KERNEX_KERNEL_TEST_PLUGIN_DIR};
    config.toolboxes = std::vector<PluginRef>{};
    config.pricing_file = std::filesystem::path(KERNEX_SOURCE_DIR) / "data/pricing.yaml";
    auto k = Kernel::create(std::move(config));
    EXPECT_TRUE(k) << k.error().describe();
    return k ? std::move(*k) : nullptr;
  }
  static std::string answer(Kernel& k, const RunOptions& options = {}) {
    auto run = k.run(Request::from_text("u", "hi"), options);
    EXPECT_TRUE(run) << run.error().describe();
    return run ? run->text : "";
  }
  // "instance=N calls=M key=K" -> N
  static std::string instance(const std::string& text) { return text.substr(0, text.find(' ')); }
  testing::TempDir dir;
};

TEST_F(KernelProviderPool, SequentialRunsReuseOneInstance) {
  auto k = kernel();
  ASSERT_TRUE(k);
  const std::string first = answer(*k);
  const std::string second = answer(*k);
  const std::string third = answer(*k);
  EXPECT_EQ(instance(first), instance(second));
  EXPECT_EQ(instance(first), instance(third));
  EXPECT_NE(first.find(" calls=1 "), std::string::npos) << first;
  EXPECT_NE(third.find(" calls=3 "), std::string::npos) << third;
}

// Four runs in flight at once (the provider holds each call until all four are inside): four
// instances, none of them with two callers. Given back, they serve the next runs.
TEST_F(KernelProviderPool, ConcurrentRunsNeverShareAnInstance) {
  constexpr int kRuns = 4;
  auto k = kernel(Json{{"barrier", kRuns}});
  ASSERT_TRUE(k);
  std::vector<std::string> answers(kRuns);
  {
    std::vector<std::jthread> runs;
    for (int i = 0; i < kRuns; ++i) runs.emplace_back([&, i] { answers[i] = answer(*k); });
  }
  std::set<std::string> instances;
  for (const auto& a : answers) {
    EXPECT_EQ(a.find('['), std::string::npos) << a;  // neither shared nor a barrier timeout
    instances.insert(instance(a));
  }
  EXPECT_EQ(instances.size(), static_cast<std::size_t>(kRuns));
  {
    std::vector<std::jthread> runs;
    for (int i = 0; i < kRuns; ++i) runs.emplace_back([&, i] { answers[i] = answer(*k); });
  }
  for (const auto& a : answers) {
    EXPECT_TRUE(instances.contains(instance(a))) << a << ": a fifth instance was made";
    EXPECT_NE(a.find(" calls=2 "), std::string::npos) << a;
  }
}

// A run's own provider options (a tenant's key) get an instance made with them, never one made
// with another run's options or the config's.
TEST_F(KernelProviderPool, RunsWithOtherOptionsNeverShare) {
  auto k = kernel(Json{{"api_key", "config"}});
  ASSERT_TRUE(k);
  RunOptions a, b;
  a.provider_options = Json{{"api_key", "tenant-a"}};
  b.provider_options = Json{{"api_key", "tenant-b"}};
  const std::string base = answer(*k);
  const std::string ra = answer(*k, a);
  const std::string rb = answer(*k, b);
  const std::string ra2 = answer(*k, a);
  EXPECT_NE(base.find("key=config"), std::string::npos) << base;
  EXPECT_NE(ra.find("key=tenant-a"), std::string::npos) << ra;
  EXPECT_NE(rb.find("key=tenant-b"), std::string::npos) << rb;
  EXPECT_NE(ra2.find("key=tenant-a"), std::string::npos) << ra2;
  EXPECT_EQ(std::set<std::string>({instance(base), instance(ra), instance(rb)}).size(), 3u);
  EXPECT_EQ(instance(ra), instance(ra2));
}

// A run cancelled while its answer streams does not hand its instance to the next run; the next
// run gets a working one.
TEST_F(KernelProviderPool, ARunCancelledMidStreamLeavesAUsableInstanceOrNone) {
  auto k = kernel();
  ASSERT_TRUE(k);
  const std::string before = answer(*k);
  std::stop_source stop;
  RunOptions options;
  options.stop = stop.get_token();
  options.sink = [&](const StreamEvent& e) {
    if (e.kind == StreamEvent::Kind::TextDelta) stop.request_stop();
  };
  auto cancelled = k->run(Request::from_text("u", "hi"), options);
  if (cancelled) {
    EXPECT_EQ(cancelled->outcome, Outcome::Cancelled);
    EXPECT_EQ(instance(cancelled->text), instance(before));  // the pooled one, partially answered
  }
  const std::string after = answer(*k);
  EXPECT_EQ(after.find('['), std::string::npos) << after;
  EXPECT_NE(instance(after), instance(before)) << "the cancelled run's instance was reused";
  EXPECT_NE(after.find(" calls=1 "), std::string::npos) << after;
}

}  // namespace
}  // namespace kernex
