// One PostgreSQL connection through libpq. Parameters and results travel as text (PostgreSQL
// casts them: `$1::bigint`), so no libpq type reaches a caller. Every error is a value: a lost
// connection is ErrorCode::Io and marks the connection broken (a pool drops it and the next call
// reconnects); an SQL error is ErrorCode::Memory carrying its SQLSTATE. No call waits forever:
// connecting has a timeout, statements have `statement_timeout`, and sockets have TCP keepalives.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kernex/error.hpp"

struct pg_conn;
struct pg_result;

namespace kernex::pg {

struct Options {
  std::string dsn;  // libpq conninfo or URI; empty: the PG* environment variables
  std::chrono::milliseconds statement_timeout{30000};
  // > 0: the server ends a session left idle inside a transaction that long, so a stalled
  // process (SIGSTOP, a hung thread) cannot hold row locks for ever.
  std::chrono::milliseconds idle_in_transaction_timeout{0};
  std::chrono::seconds connect_timeout{5};
  std::string application_name = "kernex";
  std::string what = "postgres";  // names the user in error messages ("postgres memory", "serve")
};

// A statement parameter: text, a number or NULL.
class Param {
 public:
  Param(std::nullopt_t) {}
  Param(std::string_view v) : value_(std::string(v)) {}
  Param(const std::string& v) : value_(v) {}
  Param(const char* v) : value_(std::string(v)) {}
  Param(std::int64_t v) : value_(std::to_string(v)) {}
  Param(int v) : value_(std::to_string(v)) {}
  Param(std::uint64_t v) : value_(std::to_string(v)) {}
  Param(std::uint32_t v) : value_(std::to_string(v)) {}
  Param(double v);
  Param(bool v) : value_(v ? "true" : "false") {}
  Param(const std::optional<std::string>& v) : value_(v) {}
  const std::optional<std::string>& value() const { return value_; }

 private:
  std::optional<std::string> value_;
};

// One statement of a pipeline: its text and $1.. parameters.
struct Statement {
  std::string sql;
  std::vector<Param> params;
};

// A statement's result rows; cells are read as text and converted on request.
class Rows {
 public:
  Rows() = default;
  explicit Rows(pg_result* result);
  int size() const { return rows_; }
  bool empty() const { return rows_ == 0; }
  bool null(int row, int col) const;
  std::string text(int row, int col) const;
  std::optional<std::string> optional_text(int row, int col) const;
  std::int64_t int64(int row, int col) const;  // 0 when NULL or not a number
  double real(int row, int col) const;
  bool boolean(int row, int col) const;                 // "t"
  std::uint64_t affected() const { return affected_; }  // rows an INSERT/UPDATE/DELETE touched

 private:
  std::shared_ptr<pg_result> result_;
  int rows_ = 0;
  std::uint64_t affected_ = 0;
};

class Connection {
 public:
  static Result<std::unique_ptr<Connection>> open(const Options& options);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // One statement with $1.. parameters (extended protocol: parameters are never parsed as SQL).
  Result<Rows> exec(std::string_view sql, std::initializer_list<Param> params = {});
  Result<Rows> exec(std::string_view sql, const std::vector<Param>& params);
  // Sends every statement, then one Sync, in libpq's pipeline mode (one round trip for all),
  // and returns each one's result in order. After the first that fails the server skips the
  // rest up to the Sync: theirs say so (ErrorCode::Memory, "skipped"). A lost connection fails
  // every statement whose result had not arrived as ErrorCode::Io. Results must be small (the
  // socket is blocking and the server's replies are read only once everything was sent).
  std::vector<Result<Rows>> pipeline(const std::vector<const Statement*>& statements);
  // Several statements without parameters (migrations), in the simple protocol.
  Result<void> script(std::string_view sql);

  // The SQLSTATE of the last failed statement ("" when it was a connection failure).
  const std::string& last_sqlstate() const { return sqlstate_; }
  bool broken() const;
  // For a connection that does not LISTEN: not broken, and the server said nothing while it sat
  // idle (what it says then is goodbye). A batch asks before it sends what it cannot send twice.
  bool alive();
  // Outside any transaction: the only state in which a pool may hand it to the next caller.
  bool idle() const;
  // LISTEN support: waits up to `timeout` for the socket, then returns the notifications that
  // arrived as (channel, payload). An error means the connection is lost.
  Result<std::vector<std::pair<std::string, std::string>>> notifications(
      std::chrono::milliseconds timeout);
  // Interrupts a wait in notifications() from another thread (writes to a self-pipe).
  void wake();

 private:
  Connection(pg_conn* conn, Options options);
  Result<Rows> run(std::string_view sql, const Param* params, std::size_t count);
  // The name of `text` prepared on this connection ("" to send it unprepared).
  Result<std::string> prepared(const std::string& text, const std::string& head, std::size_t count);
  Result<std::vector<const char*>> values(const Param* params, std::size_t count);
  static bool transaction_control(const std::string& head, std::size_t count);
  static constexpr std::size_t kMaxPrepared = 512;
  std::unexpected<Error> failure(const std::string& what, pg_result* result);
  struct Pipeline;  // pipeline()'s steps (pipeline.cpp)
  friend struct Pipeline;

  pg_conn* conn_;
  Options options_;
  std::string sqlstate_;
  std::unordered_map<std::string, std::string> prepared_;  // statement text -> name
  int wake_pipe_[2] = {-1, -1};
  bool poisoned_ = false;  // a pipeline left it in an unknown state: broken() from now on
};

// SQLSTATEs callers branch on.
inline constexpr std::string_view kUniqueViolation = "23505";
inline constexpr std::string_view kSerializationFailure = "40001";
inline constexpr std::string_view kDeadlockDetected = "40P01";

}  // namespace kernex::pg
