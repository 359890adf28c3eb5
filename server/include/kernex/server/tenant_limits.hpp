// Per-tenant admission for `kernex serve`: concurrent runs and daily (UTC) token and cost budgets.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace kernex::server {

// Each limit is off when absent.
struct TenantLimit {
  std::optional<std::uint32_t> max_concurrent_runs = std::nullopt;
  std::optional<std::uint64_t> tokens_per_day = std::nullopt;  // input + output tokens, UTC day
  std::optional<double> cost_per_day_usd = std::nullopt;       // UTC day
};

struct Admission {
  enum class Refusal { None, Concurrent, Tokens, Cost };
  Refusal refusal = Refusal::None;
  std::chrono::seconds retry_after{0};  // for the Retry-After header; 0 when admitted
  std::string message;                  // why, for the response body; empty when admitted

  bool ok() const noexcept { return refusal == Refusal::None; }
  explicit operator bool() const noexcept { return ok(); }
};

// "concurrent", "tokens", "cost" (or "none"), for logs, metrics and error bodies.
std::string_view to_string(Admission::Refusal refusal) noexcept;

// Why `tenant` was refused, for the response body (`active`: its runs going, for Concurrent);
// shared with the limits cluster mode counts in PostgreSQL (server/src/cluster_limits.cpp).
std::string refusal_message(Admission::Refusal refusal, std::string_view tenant,
                            const TenantLimit& limit, std::uint32_t active);

// What a tenant has used: runs now, and tokens and cost on the current UTC day.
struct TenantUsage {
  std::uint32_t active_runs = 0;
  std::uint64_t tokens_today = 0;
  double cost_today_usd = 0;
};

// Thread-safe. A run is admitted by try_start and must be ended by exactly one finish, which
// records what it used. A daily budget refuses new runs once it is used up; a run already going
// may overshoot it, since a run's tokens are known only at its end.
class TenantLimits {
 public:
  using Clock = std::function<std::chrono::system_clock::time_point()>;

  explicit TenantLimits(
      TenantLimit defaults = {}, std::map<std::string, TenantLimit, std::less<>> per_tenant = {},
      Clock clock = [] { return std::chrono::system_clock::now(); });

  // The limit for tenants without their own entry, and a tenant's own (replacing the default
  // whole).
  void set_default(TenantLimit limit);
  void set(std::string_view tenant, TenantLimit limit);
  TenantLimit limit_for(std::string_view tenant) const;

  // Admits a run (counting it as active) or refuses it: too many concurrent runs (retry after 1 s),
  // or today's tokens or cost used up (retry after the next UTC midnight).
  Admission try_start(std::string_view tenant);
  // Ends a run admitted by try_start, adding its usage to today's.
  void finish(std::string_view tenant, std::uint64_t tokens, double cost_usd);

  TenantUsage usage(std::string_view tenant) const;

 private:
  struct Counters {
    std::uint32_t active = 0;
    std::int64_t day = 0;  // days since the epoch (UTC) that tokens/cost belong to
    std::uint64_t tokens = 0;
    double cost = 0;
  };
  Counters& counters_locked(std::string_view tenant, std::int64_t today);
  const TenantLimit& limit_locked(std::string_view tenant) const;

  mutable std::mutex mu_;
  TenantLimit defaults_;
  std::map<std::string, TenantLimit, std::less<>> per_tenant_;
  std::map<std::string, Counters, std::less<>> counters_;
  Clock clock_;
};

}  // namespace kernex::server
