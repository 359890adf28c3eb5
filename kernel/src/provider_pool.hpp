// Provider instances leased to runs, so a run does not pay for a plugin's factory (a replay
// script read and parsed, an HTTP provider's options checked and its client set up).
// - A lease is exclusive: the instance is the holder's alone until its last reference goes, then
//   it is idle again. Concurrent runs never share one, so plugins need not be thread-safe.
// - Instances are kept per key: the provider's name and its effective options, whole (API keys,
//   base_url, script...). A run whose options differ in anything gets another instance, so a
//   tenant never gets one built with another's options.
// - Bounded: at most `max_idle_per_key` idle instances per key, at most `max_keys` keys (the
//   least recently used key goes first; its leased instances are dropped when given back).
// - A lease marked with discard() is destroyed instead of returned (a cancelled or failed run:
//   the instance may hold a half-read response).
// - Twins: when an instance's concurrent_instance() gives one (the replay provider: one script
//   shared by all), the key's first instance stays as the template and leases are its twins;
//   otherwise each new instance comes from the plugin's factory, made outside the pool's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/provider.hpp"

namespace kernex {

struct ProviderPoolLimits {
  std::size_t max_idle_per_key = 16;
  std::size_t max_keys = 32;
  bool enabled = true;  // off: every lease is a new instance from the factory, never kept
  // The defaults, with KERNEX_PROVIDER_POOL=off switching pooling off (a bench's baseline).
  static ProviderPoolLimits from_env();
};

struct ProviderPoolStats {
  std::uint64_t created = 0;  // factory calls that gave an instance
  std::uint64_t twinned = 0;  // instances from a template's concurrent_instance()
  std::uint64_t reused = 0;   // leases served from idle instances
  std::uint64_t dropped = 0;  // returned instances destroyed (discarded, over the cap, evicted)
  std::uint64_t evicted = 0;  // keys evicted
  std::size_t idle = 0;       // idle instances now, all keys
  std::size_t keys = 0;       // keys now
};

class ProviderPool {
 public:
  using Factory = std::function<Result<std::shared_ptr<Provider>>(const std::string& name,
                                                                  const Json& options)>;

  explicit ProviderPool(Factory factory,
                        ProviderPoolLimits limits = ProviderPoolLimits::from_env());
  ~ProviderPool();
  ProviderPool(const ProviderPool&) = delete;
  ProviderPool& operator=(const ProviderPool&) = delete;

  // An instance of `name` made with `options`, the caller's alone until its last reference goes.
  // Leases may outlive the pool: they are then destroyed when released.
  Result<std::shared_ptr<Provider>> lease(const std::string& name, const Json& options);

  // The lease's instance is destroyed rather than made idle when released. No effect on a
  // pointer that is not a lease of some pool.
  static void discard(const std::shared_ptr<Provider>& leased) noexcept;

  ProviderPoolStats stats() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace kernex
