// A fixed-size pool of connections: a caller leases one for a statement or a transaction and
// gives it back on scope exit; a broken connection is dropped and the next lease reconnects, as
// is one the server dropped while it sat idle in the pool (pooled connections never LISTEN).
// acquire() waits at most `wait` for a free connection, then fails (never hangs).
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "kernex/pg/connection.hpp"

namespace kernex::pg {

class Pool;

class Lease {
 public:
  Lease(Pool* pool, std::unique_ptr<Connection> conn) : pool_(pool), conn_(std::move(conn)) {}
  Lease(Lease&&) = default;
  Lease& operator=(Lease&&) = delete;
  ~Lease();
  Connection& operator*() { return *conn_; }
  Connection* operator->() { return conn_.get(); }

 private:
  Pool* pool_;
  std::unique_ptr<Connection> conn_;
};

class Pool {
 public:
  Pool(Options options, std::size_t size,
       std::chrono::milliseconds wait = std::chrono::seconds(30));
  Result<Lease> acquire();
  const Options& options() const { return options_; }

  // Runs `body` inside BEGIN ... COMMIT on one leased connection; rolls back when it fails, and
  // runs it again (up to 5 times) after a serialization failure or deadlock.
  template <class T>
  Result<T> transaction(const std::function<Result<T>(Connection&)>& body);

 private:
  friend class Lease;
  void release(std::unique_ptr<Connection> conn);

  Options options_;
  std::size_t size_;
  std::chrono::milliseconds wait_;
  std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<std::unique_ptr<Connection>> idle_;
  std::size_t leased_ = 0;
};

template <class T>
Result<T> Pool::transaction(const std::function<Result<T>(Connection&)>& body) {
  for (int attempt = 0;; ++attempt) {
    KERNEX_ASSIGN_OR_RETURN(auto lease, acquire());
    Connection& c = *lease;
    KERNEX_RETURN_IF_ERROR(c.exec("BEGIN"));
    Result<T> out = body(c);
    if (out) {
      if (auto r = c.exec("COMMIT"); !r) {
        const bool retry =
            (c.last_sqlstate() == kSerializationFailure || c.last_sqlstate() == kDeadlockDetected);
        if (retry && attempt < 4) continue;
        return std::unexpected(r.error());
      }
      return out;
    }
    const std::string state = c.last_sqlstate();
    if (!c.broken()) (void)c.exec("ROLLBACK");
    if ((state == kSerializationFailure || state == kDeadlockDetected) && attempt < 4) continue;
    return out;
  }
}

}  // namespace kernex::pg
