// A thin RAII layer over one SQLite connection: cached prepared statements, typed binds and
// reads, and write transactions that take the write lock up front (BEGIN IMMEDIATE), so two
// processes never deadlock upgrading a read to a write.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "kernex/error.hpp"

namespace kernex::sqlite {

// A datetime() modifier such as "+30 seconds" or "-5 minutes", appended piece by piece: g++ 12 at
// -O2 reports a false -Wrestrict on "+" + std::to_string(n) (GCC bug 105329).
inline std::string datetime_offset(long long n, std::string_view unit) {
  std::string out = n < 0 ? "-" : "+";
  out += std::to_string(n < 0 ? -n : n);
  out += ' ';
  out += unit;
  return out;
}

class Db;

// A cached statement, reset and unbound when this handle goes away.
class Stmt {
 public:
  Stmt(Db& db, sqlite3_stmt* stmt) : db_(&db), stmt_(stmt) {}
  Stmt(Stmt&& o) noexcept : db_(o.db_), stmt_(o.stmt_), bind_error_(o.bind_error_) {
    o.stmt_ = nullptr;
  }
  Stmt& operator=(Stmt&&) = delete;
  ~Stmt();

  Stmt& bind(int i, std::string_view v);
  Stmt& bind(int i, const std::string& v) { return bind(i, std::string_view(v)); }
  Stmt& bind(int i, const char* v) { return bind(i, std::string_view(v)); }
  Stmt& bind(int i, std::int64_t v);
  Stmt& bind(int i, std::uint64_t v) { return bind(i, static_cast<std::int64_t>(v)); }
  Stmt& bind(int i, int v) { return bind(i, static_cast<std::int64_t>(v)); }
  Stmt& bind(int i, std::uint32_t v) { return bind(i, static_cast<std::int64_t>(v)); }
  Stmt& bind(int i, double v);
  Stmt& bind(int i, std::nullopt_t);
  template <class T>
  Stmt& bind(int i, const std::optional<T>& v) {
    return v ? bind(i, *v) : bind(i, std::nullopt);
  }
  template <class... A>
  Stmt& bind_all(const A&... args) {
    int i = 0;
    (bind(++i, args), ...);
    return *this;
  }

  // True while a row is available.
  Result<bool> step();
  // Steps to completion; returns sqlite3_changes.
  Result<std::uint64_t> run();

  std::string text(int col) const;
  std::optional<std::string> opt_text(int col) const;
  std::int64_t integer(int col) const;
  double real(int col) const;
  bool null(int col) const;
  bool is_integer(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_INTEGER; }
  bool is_real(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_FLOAT; }

 private:
  Stmt& check(int rc);

  Db* db_;
  sqlite3_stmt* stmt_;
  int bind_error_ = SQLITE_OK;
};

struct OpenOptions {
  int busy_timeout_ms = 5000;
  std::string synchronous = "NORMAL";  // WAL + NORMAL: survives process crashes
  std::optional<std::int64_t> max_pages;
};

class Db {
 public:
  // Creates the parent directory 0700 and the file 0600 (before SQLite touches it), then
  // opens it in WAL mode with a busy timeout and runs `setup` (the migrations). Processes starting
  // together on a new data dir would race to create, switch to WAL and migrate, and SQLite answers
  // some of those races with "database is locked" whatever the busy timeout; so all of it runs
  // under an flock on "<path>.open-lock".
  using Setup = Result<void> (*)(Db&);
  static Result<std::unique_ptr<Db>> open(const std::filesystem::path& path,
                                          const OpenOptions& options, Setup setup = nullptr);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  Result<Stmt> prepare(const char* sql);  // cached by SQL text
  Result<void> exec(const char* sql);     // one or more statements, not cached

  // Runs `body` inside BEGIN IMMEDIATE … COMMIT; rolls back when it fails.
  template <class T>
  Result<T> write(const std::function<Result<T>()>& body);

  // Runs one statement that returns no rows, prepared once and kept (exec parses it each time).
  Result<void> run_cached(const char* sql);
  Error error(std::string what) const;  // `what` plus SQLite's message and the file
  sqlite3* handle() { return db_; }
  const std::filesystem::path& path() const { return path_; }
  std::int64_t last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }

 private:
  Db(sqlite3* db, std::filesystem::path path) : db_(db), path_(std::move(path)) {}
  Result<void> enter_wal(int busy_timeout_ms);
  Result<void> begin();
  Result<void> commit();
  void rollback();

  sqlite3* db_;
  std::filesystem::path path_;
  std::map<std::string, sqlite3_stmt*, std::less<>> cache_;
};

template <class T>
Result<T> Db::write(const std::function<Result<T>()>& body) {
  KERNEX_RETURN_IF_ERROR(begin());
  Result<T> r = body();
  if (!r) {
    rollback();
    return r;
  }
  if (auto c = commit(); !c) {
    rollback();
    return std::unexpected(c.error());
  }
  return r;
}

}  // namespace kernex::sqlite
