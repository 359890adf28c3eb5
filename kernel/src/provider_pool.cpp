#include "provider_pool.hpp"

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>
#include <vector>

namespace kernex {
namespace {

// The instances of one key. `make`, `probed` and `templ` belong to the key's instance making;
// `idle`, `last_used` and `evicted` to the pool's mutex.
struct Bucket {
  Bucket(std::string n, Json o) : name(std::move(n)), options(std::move(o)) {}
  const std::string name;
  const Json options;
  std::mutex make;  // the first lease of a key makes its first instance; the others wait for it
  bool probed = false;
  std::shared_ptr<Provider> templ;  // kept while the key lives: leases are its twins
  std::vector<std::shared_ptr<Provider>> idle;
  std::uint64_t last_used = 0;
  bool evicted = false;  // out of the pool: what is given back is dropped
};

// The key holds every byte of the options (CBOR keeps strings as they are, where dump() would
// throw on invalid UTF-8 or, told to replace it, make two different options one key), and the
// name's length first so no name and options run into another pair's.
std::string key_of(const std::string& name, const Json& options) {
  const std::vector<std::uint8_t> bytes = Json::to_cbor(options);
  std::string key = std::to_string(name.size()) + ':' + name;
  key.append(bytes.begin(), bytes.end());
  return key;
}

std::shared_ptr<Provider> twin_of(Provider& instance) {
  try {
    return instance.concurrent_instance();
  } catch (...) {
    return nullptr;  // a plugin's failure to twin: the factory makes the next one
  }
}

}  // namespace

ProviderPoolLimits ProviderPoolLimits::from_env() {
  ProviderPoolLimits limits;
  if (const char* v = std::getenv("KERNEX_PROVIDER_POOL")) {
    const std::string_view value(v);
    limits.enabled = !(value == "off" || value == "0" || value == "false" || value == "no");
  }
  return limits;
}

struct ProviderPool::Impl {
  // A lease's deleter: gives the instance back to its key, or drops it.
  struct Return {
    std::weak_ptr<Impl> pool;
    std::shared_ptr<Bucket> bucket;
    std::shared_ptr<Provider> instance;
    std::atomic<bool> discard{false};

    Return(std::weak_ptr<Impl> p, std::shared_ptr<Bucket> b, std::shared_ptr<Provider> i)
        : pool(std::move(p)), bucket(std::move(b)), instance(std::move(i)) {}
    Return(Return&& other) noexcept
        : pool(std::move(other.pool)),
          bucket(std::move(other.bucket)),
          instance(std::move(other.instance)),
          discard(other.discard.load()) {}
    Return(const Return& other)
        : pool(other.pool),
          bucket(other.bucket),
          instance(other.instance),
          discard(other.discard.load()) {}

    void operator()(Provider*) noexcept {
      std::shared_ptr<Provider> held = std::move(instance);
      if (auto owner = pool.lock()) owner->give_back(*bucket, std::move(held), discard.load());
    }
  };

  Impl(Factory f, ProviderPoolLimits l) : factory(std::move(f)), limits(l) {}

  Factory factory;
  const ProviderPoolLimits limits;
  mutable std::mutex mutex;
  std::map<std::string, std::shared_ptr<Bucket>> buckets;
  std::uint64_t clock = 0;
  std::atomic<std::uint64_t> created{0}, twinned{0}, reused{0}, dropped{0}, evicted{0};

  // What is dropped is destroyed after the lock is released: a provider's destructor may be slow.
  void give_back(Bucket& bucket, std::shared_ptr<Provider> instance, bool discard) {
    std::shared_ptr<Provider> doomed;
    std::lock_guard lock(mutex);
    if (discard || bucket.evicted || bucket.idle.size() >= limits.max_idle_per_key) {
      doomed = std::move(instance);
      ++dropped;
    } else {
      bucket.idle.push_back(std::move(instance));
    }
    // `lock` is released before `doomed` is destroyed (reverse order of declaration).
  }

  // With the lock held: the least recently used keys go until at most max_keys remain, never
  // `keep` (the key being leased). Their idle instances and the keys themselves (a template) are
  // moved to `doomed`, to be destroyed once the lock is released.
  void evict_over_cap(const std::string& keep, std::vector<std::shared_ptr<void>>& doomed) {
    while (buckets.size() > limits.max_keys) {
      auto victim = buckets.end();
      for (auto it = buckets.begin(); it != buckets.end(); ++it) {
        if (it->first == keep) continue;
        if (victim == buckets.end() || it->second->last_used < victim->second->last_used)
          victim = it;
      }
      if (victim == buckets.end()) return;
      Bucket& gone = *victim->second;
      gone.evicted = true;
      dropped += gone.idle.size();
      for (auto& instance : gone.idle) doomed.push_back(std::move(instance));
      gone.idle.clear();
      doomed.push_back(std::move(victim->second));
      buckets.erase(victim);
      ++evicted;
    }
  }

  // A new instance for the key: a twin of its template, else one from the factory (outside any
  // lock, so a burst of leases for a provider without twins makes its instances in parallel).
  Result<std::shared_ptr<Provider>> make(Bucket& bucket) {
    std::unique_lock making(bucket.make);
    if (!bucket.probed) {
      KERNEX_ASSIGN_OR_RETURN(auto first, made(bucket));
      bucket.probed = true;
      auto twin = twin_of(*first);
      if (!twin) return first;  // no twins: this one is leased, the factory makes the others
      bucket.templ = std::move(first);
      ++twinned;
      return twin;
    }
    if (bucket.templ) {
      if (auto twin = twin_of(*bucket.templ)) {
        ++twinned;
        return twin;
      }
    }
    making.unlock();
    return made(bucket);
  }

  Result<std::shared_ptr<Provider>> made(const Bucket& bucket) {
    KERNEX_ASSIGN_OR_RETURN(auto instance, factory(bucket.name, bucket.options));
    if (!instance) {
      return fail(ErrorCode::Plugin,
                  "provider plugin '" + bucket.name + "' made no instance (a null pointer)");
    }
    ++created;
    return instance;
  }
};

ProviderPool::ProviderPool(Factory factory, ProviderPoolLimits limits)
    : impl_(std::make_shared<Impl>(std::move(factory), limits)) {}

ProviderPool::~ProviderPool() = default;

Result<std::shared_ptr<Provider>> ProviderPool::lease(const std::string& name,
                                                      const Json& options) {
  Impl& p = *impl_;
  if (!p.limits.enabled) {
    // The baseline: a new instance per run, as before pooling, kept by nobody.
    Bucket once(name, options);
    return p.made(once);
  }
  const std::string key = key_of(name, options);
  std::shared_ptr<Bucket> bucket;
  std::shared_ptr<Provider> instance;
  std::vector<std::shared_ptr<void>> doomed;  // destroyed after the lock is released
  {
    std::lock_guard lock(p.mutex);
    auto [it, fresh] = p.buckets.try_emplace(key);
    if (fresh) {
      it->second = std::make_shared<Bucket>(name, options);
      p.evict_over_cap(key, doomed);
    }
    bucket = it->second;
    bucket->last_used = ++p.clock;
    if (!bucket->idle.empty()) {
      instance = std::move(bucket->idle.back());
      bucket->idle.pop_back();
      ++p.reused;
    }
  }
  doomed.clear();
  if (!instance) {
    KERNEX_ASSIGN_OR_RETURN(instance, p.make(*bucket));
  }
  Provider* raw = instance.get();
  return std::shared_ptr<Provider>(raw,
                                   Impl::Return(impl_, std::move(bucket), std::move(instance)));
}

void ProviderPool::discard(const std::shared_ptr<Provider>& leased) noexcept {
  if (auto* lease = std::get_deleter<Impl::Return>(leased)) lease->discard = true;
}

ProviderPoolStats ProviderPool::stats() const {
  const Impl& p = *impl_;
  ProviderPoolStats s;
  s.created = p.created;
  s.twinned = p.twinned;
  s.reused = p.reused;
  s.dropped = p.dropped;
  s.evicted = p.evicted;
  std::lock_guard lock(p.mutex);
  s.keys = p.buckets.size();
  for (const auto& [key, bucket] : p.buckets) s.idle += bucket->idle.size();
  return s;
}

}  // namespace kernex
