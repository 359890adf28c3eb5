#include "kernex/pg/writer.hpp"

#include <algorithm>
#include <optional>

namespace kernex::pg {
namespace {

bool conflict(const std::string& sqlstate) {
  return sqlstate == kSerializationFailure || sqlstate == kDeadlockDetected;
}

// PostgreSQL text cannot hold NUL: refused before the write joins a batch, so it fails alone.
Result<void> sendable(const Write& w, const std::string& what) {
  for (const auto& s : w.statements) {
    for (std::size_t i = 0; i < s.params.size(); ++i) {
      const auto& v = s.params[i].value();
      if (v && v->find('\0') != std::string::npos) {
        return fail(ErrorCode::Parse, what + ": parameter $" + std::to_string(i + 1) +
                                          " holds a NUL byte, which PostgreSQL text cannot store");
      }
    }
  }
  return {};
}

// A statement failed: the write's check, shown the rows before it, may know why better (a
// conversation that is not there, rather than the foreign key that says so).
Result<void> explained(const Write& w, const std::vector<Rows>& before, const Error& failed) {
  if (w.check) {
    if (auto why = w.check(before); !why) return std::unexpected(why.error());
  }
  return std::unexpected(failed);
}

}  // namespace

// The batch's transaction on the writer's own connection. Each write of the batch is only
// collected while GroupCommit runs it; commit() sends them all in one pipeline.
class Writer::Batch final : public BatchTarget {
 public:
  explicit Batch(Options options) : options_(std::move(options)) {}

  void add(const Write* write, Result<void>* slot) { pending_.push_back({write, slot}); }
  Result<void> begin(bool) override {
    pending_.clear();
    return {};
  }
  Result<void> mark() override { return {}; }
  Result<void> release() override { return {}; }
  void undo() override {}
  bool open() override { return true; }
  Result<void> commit() override;
  void rollback() override {
    pending_.clear();
    if (conn_ && !conn_->broken() && !conn_->idle()) (void)conn_->exec("ROLLBACK");
  }

  std::atomic<std::uint64_t> commits{0}, trips{0}, failed{0};

 private:
  struct Pending {
    const Write* write;
    Result<void>* slot;
    bool settled = false;
  };
  // One try of the writes not yet settled; nullopt when a write was settled and the rest must
  // run again.
  std::optional<Result<void>> attempt(int& conflicts);
  // The first write whose statement failed or whose check refused, and its answer.
  Pending* culprit(std::vector<Pending*>& live, std::vector<Result<Rows>>& results,
                   Result<void>& verdict);

  Options options_;
  std::unique_ptr<Connection> conn_;
  std::vector<Pending> pending_;
};

Result<void> Writer::Batch::commit() {
  int conflicts = 0;
  // Each rerun settles one more write: bounded by the batch's size, plus the conflict retries.
  for (std::size_t tries = 0; tries <= pending_.size() + 5; ++tries) {
    if (auto done = attempt(conflicts)) return *done;
  }
  return fail(ErrorCode::Internal, options_.what + ": a batch did not settle");
}

std::optional<Result<void>> Writer::Batch::attempt(int& conflicts) {
  static const Statement kBegin{"BEGIN", {}}, kCommit{"COMMIT", {}};
  std::vector<Pending*> live;
  for (auto& p : pending_)
    if (!p.settled) live.push_back(&p);
  if (live.empty()) return Result<void>{};
  // A connection the server dropped while it sat idle (a restart, an administrator) is found
  // before anything is sent, so the batch never runs twice.
  if (!conn_ || !conn_->alive()) {
    conn_.reset();
    auto opened = Connection::open(options_);
    if (!opened) return Result<void>(std::unexpected(opened.error()));
    conn_ = std::move(*opened);
  }
  // Without checks the COMMIT rides the same pipeline: one round trip for the whole batch.
  const bool checks =
      std::any_of(live.begin(), live.end(), [](Pending* p) { return bool(p->write->check); });
  std::vector<const Statement*> list{&kBegin};
  for (Pending* p : live)
    for (const auto& s : p->write->statements) list.push_back(&s);
  if (!checks) list.push_back(&kCommit);
  auto results = conn_->pipeline(list);
  ++trips;
  const bool all_ok = std::all_of(results.begin(), results.end(), [](auto& r) { return bool(r); });
  if (conn_->broken() && !(all_ok && !checks)) {
    // Lost during the batch: whether it committed is unknown, and every waiter is told so.
    auto lost = std::find_if(results.begin(), results.end(),
                             [](auto& r) { return !r && r.error().code == ErrorCode::Io; });
    conn_.reset();
    if (lost != results.end()) return Result<void>(std::unexpected(lost->error()));
    return Result<void>(fail(ErrorCode::Io, options_.what + ": connection to PostgreSQL lost"));
  }
  if (!results.front()) return Result<void>(std::unexpected(results.front().error()));
  Result<void> verdict;
  Pending* blamed = culprit(live, results, verdict);
  if (!blamed) {
    Result<Rows> committed = checks ? conn_->exec("COMMIT") : std::move(results.back());
    if (checks) ++trips;
    if (committed) {
      ++commits;
      for (Pending* p : live) {
        *p->slot = {};
        p->settled = true;
      }
      return Result<void>{};
    }
    const bool retry = conflict(conn_->last_sqlstate()) && ++conflicts < 5;
    if (!conn_->broken() && !conn_->idle()) (void)conn_->exec("ROLLBACK");
    if (retry) return std::nullopt;
    return Result<void>(std::unexpected(committed.error()));
  }
  // A deadlock or a serialization failure is the batch's luck, not the write's: all again.
  const bool retry = !verdict && conflict(conn_->last_sqlstate()) && ++conflicts < 5;
  if (!retry) {
    *blamed->slot = std::move(verdict);
    blamed->settled = true;
    if (!*blamed->slot) ++failed;
  }
  (void)conn_->exec("ROLLBACK");
  ++trips;
  return std::nullopt;
}

Writer::Batch::Pending* Writer::Batch::culprit(std::vector<Pending*>& live,
                                               std::vector<Result<Rows>>& results,
                                               Result<void>& verdict) {
  std::size_t at = 1;  // after BEGIN
  for (Pending* p : live) {
    std::vector<Rows> rows;
    for (std::size_t i = 0; i < p->write->statements.size(); ++i, ++at) {
      if (!results[at]) {
        verdict = explained(*p->write, rows, results[at].error());
        return p;
      }
      rows.push_back(std::move(*results[at]));
    }
    if (!p->write->check) continue;
    auto keep = p->write->check(rows);
    if (!keep || !*keep) {
      verdict = keep ? Result<void>{} : Result<void>(std::unexpected(keep.error()));
      return p;
    }
  }
  return nullptr;
}

GroupCommit::Options Writer::defaults() {
  GroupCommit::Options o;
  o.max_batch = 64;
  return o;
}

Writer::Writer(Pool& pool, GroupCommit::Options options) : pool_(pool) {
  auto batch = std::make_unique<Batch>(pool.options());
  batch_ = batch.get();
  group_ = std::make_unique<GroupCommit>(std::move(batch), options);
}

Writer::~Writer() = default;

Result<void> Writer::write(const Write& w) {
  KERNEX_RETURN_IF_ERROR(sendable(w, pool_.options().what));
  if (group_->direct()) return write_direct(w);
  Result<void> slot = fail(ErrorCode::Internal, pool_.options().what + ": the write did not run");
  Batch* batch = batch_;
  KERNEX_RETURN_IF_ERROR(group_->write([batch, &w, &slot] {
    batch->add(&w, &slot);
    return Result<void>{};
  }));
  return slot;
}

void Writer::submit(Write w, std::function<void(const Result<void>&)> done) {
  if (auto ok = sendable(w, pool_.options().what); !ok || group_->direct()) {
    done(ok ? write_direct(w) : ok);
    return;
  }
  struct Held {
    Write write;
    Result<void> slot = fail(ErrorCode::Internal, "pg writer: the write did not run");
  };
  auto held = std::make_shared<Held>(Held{std::move(w)});
  Batch* batch = batch_;
  group_->submit(
      [batch, held] {
        batch->add(&held->write, &held->slot);
        return Result<void>{};
      },
      false, [held, done = std::move(done)](const Result<void>& r) { done(r ? held->slot : r); });
}

// The path before group commit: one transaction per write on a pooled connection, one round trip
// per statement (a lone statement without a check commits on its own).
Result<void> Writer::write_direct(const Write& w) {
  ++direct_writes_;
  for (int attempt = 0;; ++attempt) {
    KERNEX_ASSIGN_OR_RETURN(auto lease, pool_.acquire());
    Connection& c = *lease;
    const bool alone = w.statements.size() == 1 && !w.check;
    if (!alone) {
      ++direct_trips_;
      KERNEX_RETURN_IF_ERROR(c.exec("BEGIN"));
    }
    std::vector<Rows> rows;
    Result<bool> keep = true;
    for (const auto& s : w.statements) {
      ++direct_trips_;
      auto r = c.exec(s.sql, s.params);
      if (!r) {
        keep = std::unexpected(explained(w, rows, r.error()).error());
        break;
      }
      rows.push_back(std::move(*r));
    }
    if (keep && w.check && rows.size() == w.statements.size()) keep = w.check(rows);
    if (alone) {
      if (keep) ++direct_commits_;
      if (!keep && conflict(c.last_sqlstate()) && attempt < 4) continue;
      return keep ? Result<void>{} : Result<void>(std::unexpected(keep.error()));
    }
    ++direct_trips_;
    if (keep && *keep) {
      auto committed = c.exec("COMMIT");
      if (committed) {
        ++direct_commits_;
        return {};
      }
      if (conflict(c.last_sqlstate()) && attempt < 4) continue;
      return std::unexpected(committed.error());
    }
    const std::string state = c.last_sqlstate();
    if (!c.broken()) (void)c.exec("ROLLBACK");
    if (!keep && conflict(state) && attempt < 4) continue;
    if (!keep) return std::unexpected(keep.error());
    return {};
  }
}

WriterStats Writer::stats() const {
  WriterStats s;
  if (group_->direct()) {
    s.writes = s.batches = direct_writes_;
    s.transactions = direct_commits_;
    s.round_trips = direct_trips_;
    return s;
  }
  const auto g = group_->stats();
  s.writes = g.items;
  s.batches = g.batches;
  s.transactions = batch_->commits;
  s.round_trips = batch_->trips;
  s.failed = batch_->failed;
  return s;
}

}  // namespace kernex::pg
