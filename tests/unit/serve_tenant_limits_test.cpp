// Per-tenant admission for `kernex serve` (kernex/server/tenant_limits.hpp).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "kernex/server/tenant_limits.hpp"

using namespace kernex::server;
using namespace std::chrono_literals;
using Clock = std::chrono::system_clock;

namespace {

// 2025-03-01T23:00:00Z
constexpr std::int64_t kLateEvening = 1740870000;

class ServeTenantLimits : public ::testing::Test {
 protected:
  TenantLimits make(TenantLimit defaults,
                    std::map<std::string, TenantLimit, std::less<>> per_tenant = {}) {
    return TenantLimits(defaults, std::move(per_tenant), [this] { return now_; });
  }
  Clock::time_point now_ = Clock::time_point(std::chrono::seconds(kLateEvening));
};

TEST_F(ServeTenantLimits, WithoutLimitsEveryRunIsAdmitted) {
  auto limits = make({});
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(limits.try_start("a"));
  EXPECT_EQ(limits.usage("a").active_runs, 100u);
  limits.finish("a", 1'000'000, 1e6);
  EXPECT_TRUE(limits.try_start("a"));
}

TEST_F(ServeTenantLimits, ConcurrentRunsAreCappedAndRetriedAfterASecond) {
  auto limits = make({.max_concurrent_runs = 2});
  ASSERT_TRUE(limits.try_start("a"));
  ASSERT_TRUE(limits.try_start("a"));
  const Admission refused = limits.try_start("a");
  EXPECT_FALSE(refused);
  EXPECT_EQ(refused.refusal, Admission::Refusal::Concurrent);
  EXPECT_EQ(to_string(refused.refusal), "concurrent");
  EXPECT_EQ(refused.retry_after, 1s);
  EXPECT_NE(refused.message.find("'a'"), std::string::npos);
  EXPECT_TRUE(limits.try_start("b")) << "tenants are counted apart";
  EXPECT_EQ(limits.usage("a").active_runs, 2u);

  limits.finish("a", 0, 0);
  EXPECT_TRUE(limits.try_start("a"));
}

TEST_F(ServeTenantLimits, DailyTokensRefuseUntilTheNextUtcMidnight) {
  auto limits = make({.tokens_per_day = 1000});
  ASSERT_TRUE(limits.try_start("a"));
  limits.finish("a", 600, 0);
  ASSERT_TRUE(limits.try_start("a")) << "600 of 1000 used";
  limits.finish("a", 600, 0);  // a run may overshoot: its usage is known only at its end
  EXPECT_EQ(limits.usage("a").tokens_today, 1200u);

  const Admission refused = limits.try_start("a");
  EXPECT_EQ(refused.refusal, Admission::Refusal::Tokens);
  EXPECT_EQ(refused.retry_after, 3600s);
  now_ += 3599s;  // 23:59:59
  EXPECT_EQ(limits.try_start("a").retry_after, 1s);

  now_ += 1s;  // midnight UTC: a new day
  EXPECT_EQ(limits.usage("a").tokens_today, 0u);
  EXPECT_TRUE(limits.try_start("a"));
  EXPECT_EQ(limits.usage("a").active_runs, 1u);
}

TEST_F(ServeTenantLimits, DailyCostRefusesUntilTheNextUtcMidnight) {
  auto limits = make({.cost_per_day_usd = 1.0});
  ASSERT_TRUE(limits.try_start("a"));
  limits.finish("a", 10, 0.4);
  ASSERT_TRUE(limits.try_start("a"));
  limits.finish("a", 10, 0.6);
  const Admission refused = limits.try_start("a");
  EXPECT_EQ(refused.refusal, Admission::Refusal::Cost);
  EXPECT_EQ(to_string(refused.refusal), "cost");
  EXPECT_EQ(refused.retry_after, 3600s);
  EXPECT_NE(refused.message.find("$1.00"), std::string::npos);

  limits.finish("a", 0, -5);  // a negative or NaN price never frees budget
  limits.finish("a", 0, std::numeric_limits<double>::quiet_NaN());
  EXPECT_FALSE(limits.try_start("a"));

  now_ += 24h;
  EXPECT_TRUE(limits.try_start("a"));
}

TEST_F(ServeTenantLimits, UsageFromARunEndingAfterMidnightCountsForTheNewDay) {
  auto limits = make({.tokens_per_day = 100});
  ASSERT_TRUE(limits.try_start("a"));
  limits.finish("a", 90, 0);
  ASSERT_TRUE(limits.try_start("a"));
  now_ += 2h;  // the run ends on the next UTC day
  limits.finish("a", 50, 0);
  EXPECT_EQ(limits.usage("a").tokens_today, 50u);
  EXPECT_EQ(limits.usage("a").active_runs, 0u);
  EXPECT_TRUE(limits.try_start("a"));
}

TEST_F(ServeTenantLimits, ATenantsOwnLimitReplacesTheDefault) {
  auto limits = make({.max_concurrent_runs = 1}, {{"big", {.max_concurrent_runs = 3}}});
  ASSERT_TRUE(limits.try_start("small"));
  EXPECT_FALSE(limits.try_start("small"));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(limits.try_start("big"));
  EXPECT_FALSE(limits.try_start("big"));

  limits.set("small", {});  // no limits at all for this tenant now
  EXPECT_TRUE(limits.try_start("small"));
  limits.set_default({.tokens_per_day = 5});
  EXPECT_EQ(limits.limit_for("other").tokens_per_day, 5u);
  EXPECT_FALSE(limits.limit_for("small").tokens_per_day);
}

TEST_F(ServeTenantLimits, ConcurrentStartsNeverExceedTheCap) {
  auto limits = make({.max_concurrent_runs = 3, .tokens_per_day = 1'000'000});
  std::atomic<int> running{0}, most{0}, admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        if (!limits.try_start("a")) continue;
        const int now = ++running;
        for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
        }
        ++admitted;
        --running;
        limits.finish("a", 1, 0);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(most.load(), 3);
  EXPECT_EQ(limits.usage("a").active_runs, 0u);
  EXPECT_EQ(limits.usage("a").tokens_today, static_cast<std::uint64_t>(admitted.load()));
}

}  // namespace
