#include "kernex/server/tenant_limits.hpp"

#include <cmath>
#include <cstdint>
#include <sstream>

namespace kernex::server {
namespace {

constexpr std::int64_t kSecondsPerDay = 86400;

std::int64_t epoch_seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::floor<std::chrono::seconds>(t.time_since_epoch()).count();
}

// Floor division, so instants before 1970 still fall on the right day.
std::int64_t utc_day(std::int64_t seconds) {
  return seconds >= 0 ? seconds / kSecondsPerDay
                      : -((-seconds + kSecondsPerDay - 1) / kSecondsPerDay);
}

std::chrono::seconds until_midnight(std::int64_t seconds) {
  return std::chrono::seconds((utc_day(seconds) + 1) * kSecondsPerDay - seconds);  // 1..86400
}

std::string usd(double v) {
  std::ostringstream s;
  s.precision(2);
  s << std::fixed << v;
  return s.str();
}

}  // namespace

std::string_view to_string(Admission::Refusal refusal) noexcept {
  switch (refusal) {
    case Admission::Refusal::None:
      return "none";
    case Admission::Refusal::Concurrent:
      return "concurrent";
    case Admission::Refusal::Tokens:
      return "tokens";
    case Admission::Refusal::Cost:
      return "cost";
  }
  return "?";
}

std::string refusal_message(Admission::Refusal refusal, std::string_view tenant,
                            const TenantLimit& limit, std::uint32_t active) {
  const std::string who = "tenant '" + std::string(tenant) + "'";
  switch (refusal) {
    case Admission::Refusal::Concurrent:
      return who + " already has " + std::to_string(active) +
             " runs going, the most it may have at once";
    case Admission::Refusal::Tokens:
      return who + " used its " + std::to_string(limit.tokens_per_day.value_or(0)) +
             " tokens for today (UTC)";
    case Admission::Refusal::Cost:
      return who + " used its $" + usd(limit.cost_per_day_usd.value_or(0)) +
             " budget for today (UTC)";
    case Admission::Refusal::None:
      break;
  }
  return {};
}

TenantLimits::TenantLimits(TenantLimit defaults,
                           std::map<std::string, TenantLimit, std::less<>> per_tenant, Clock clock)
    : defaults_(defaults), per_tenant_(std::move(per_tenant)), clock_(std::move(clock)) {}

void TenantLimits::set_default(TenantLimit limit) {
  std::lock_guard guard(mu_);
  defaults_ = limit;
}

void TenantLimits::set(std::string_view tenant, TenantLimit limit) {
  std::lock_guard guard(mu_);
  per_tenant_.insert_or_assign(std::string(tenant), limit);
}

TenantLimit TenantLimits::limit_for(std::string_view tenant) const {
  std::lock_guard guard(mu_);
  return limit_locked(tenant);
}

const TenantLimit& TenantLimits::limit_locked(std::string_view tenant) const {
  auto it = per_tenant_.find(tenant);
  return it == per_tenant_.end() ? defaults_ : it->second;
}

TenantLimits::Counters& TenantLimits::counters_locked(std::string_view tenant, std::int64_t today) {
  auto it = counters_.find(tenant);
  if (it == counters_.end())
    it = counters_.emplace(std::string(tenant), Counters{0, today, 0, 0}).first;
  if (it->second.day != today) {  // a new UTC day: yesterday's usage no longer counts
    it->second.day = today;
    it->second.tokens = 0;
    it->second.cost = 0;
  }
  return it->second;
}

Admission TenantLimits::try_start(std::string_view tenant) {
  const std::int64_t now = epoch_seconds(clock_());
  std::lock_guard guard(mu_);
  const TenantLimit& limit = limit_locked(tenant);
  Counters& c = counters_locked(tenant, utc_day(now));
  Admission a;
  if (limit.max_concurrent_runs && c.active >= *limit.max_concurrent_runs) {
    a.refusal = Admission::Refusal::Concurrent;
    a.retry_after = std::chrono::seconds(1);
  } else if (limit.tokens_per_day && c.tokens >= *limit.tokens_per_day) {
    a.refusal = Admission::Refusal::Tokens;
    a.retry_after = until_midnight(now);
  } else if (limit.cost_per_day_usd && !(c.cost < *limit.cost_per_day_usd)) {
    a.refusal = Admission::Refusal::Cost;
    a.retry_after = until_midnight(now);
  } else {
    ++c.active;
    return a;
  }
  a.message = refusal_message(a.refusal, tenant, limit, c.active);
  return a;
}

void TenantLimits::finish(std::string_view tenant, std::uint64_t tokens, double cost_usd) {
  const std::int64_t now = epoch_seconds(clock_());
  std::lock_guard guard(mu_);
  Counters& c = counters_locked(tenant, utc_day(now));
  if (c.active > 0) --c.active;
  c.tokens = tokens > UINT64_MAX - c.tokens ? UINT64_MAX : c.tokens + tokens;
  if (std::isfinite(cost_usd) && cost_usd > 0)
    c.cost += cost_usd;  // a bad price never frees budget
}

TenantUsage TenantLimits::usage(std::string_view tenant) const {
  const std::int64_t today = utc_day(epoch_seconds(clock_()));
  std::lock_guard guard(mu_);
  auto it = counters_.find(tenant);
  if (it == counters_.end()) return {};
  const Counters& c = it->second;
  if (c.day != today) return {c.active, 0, 0};
  return {c.active, c.tokens, c.cost};
}

}  // namespace kernex::server
