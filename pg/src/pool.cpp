#include "kernex/pg/pool.hpp"

namespace kernex::pg {

Lease::~Lease() {
  if (pool_ && conn_) pool_->release(std::move(conn_));
}

Pool::Pool(Options options, std::size_t size, std::chrono::milliseconds wait)
    : options_(std::move(options)), size_(std::max<std::size_t>(1, size)), wait_(wait) {}

Result<Lease> Pool::acquire() {
  std::unique_lock lock(mutex_);
  if (!freed_.wait_for(lock, wait_, [&] { return !idle_.empty() || leased_ < size_; })) {
    return fail(ErrorCode::Limit, options_.what + ": no free PostgreSQL connection within " +
                                      std::to_string(wait_.count()) + " ms (pool size " +
                                      std::to_string(size_) + ")");
  }
  ++leased_;
  // A connection the server dropped while it sat here (a restart, an administrator, a killed
  // backend) is replaced, never handed out to fail the caller's statement.
  while (!idle_.empty()) {
    auto conn = std::move(idle_.back());
    idle_.pop_back();
    if (conn->alive()) return Lease(this, std::move(conn));
  }
  lock.unlock();  // connecting takes a network round trip or more: not under the lock
  auto conn = Connection::open(options_);
  if (!conn) {
    std::lock_guard again(mutex_);
    --leased_;
    freed_.notify_one();
    return std::unexpected(conn.error());
  }
  return Lease(this, std::move(*conn));
}

void Pool::release(std::unique_ptr<Connection> conn) {
  std::lock_guard lock(mutex_);
  --leased_;
  // A connection left inside a transaction (a body that threw, say) is closed, never reused:
  // the next caller's statements would join that transaction.
  if (!conn->broken() && conn->idle()) idle_.push_back(std::move(conn));
  freed_.notify_one();
}

}  // namespace kernex::pg
