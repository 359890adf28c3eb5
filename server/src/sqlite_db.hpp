// What the stores in serve.db share: opening the file (owner only, WAL, one first opener at a
// time) and a prepared statement that finalizes itself.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <string>

#include "kernex/error.hpp"

namespace kernex::server {

std::unexpected<Error> db_error(sqlite3* db, const std::string& what);

// Opens (creating) `file` in WAL mode with synchronous=NORMAL and secure_delete: a commit is in the
// WAL file before it returns, so a process kill loses nothing committed. `schema` (CREATE ... IF
// NOT EXISTS) runs while the first-open lock is held. The caller closes the handle.
Result<sqlite3*> open_serve_db(const std::filesystem::path& file,
                               std::initializer_list<const char*> schema);

// Copies the WAL into the database and truncates it to zero bytes, so rows deleted (and zeroed
// by secure_delete, which every connection sets) leave no older copy in the -wal file. Waits for
// readers within the busy timeout.
Result<void> truncate_wal(sqlite3* db);

// Runs `sql` (no parameters, no rows).
Result<void> exec_sql(sqlite3* db, const char* sql);

// Closes a connection made by open_serve_db, finalizing the statements kept for it.
void close_serve_db(sqlite3* db);

// A prepared statement of a connection made by open_serve_db, prepared once per connection and
// SQL text and reused (parsing SQL cost ~8 % of a run's CPU in bench/serve): taken here, reset
// and given back on scope exit. Two Statements of one text at once get two statements.
sqlite3_stmt* take_statement(sqlite3* db, const char* sql);
void give_statement(sqlite3* db, sqlite3_stmt* stmt);

class Statement {
 public:
  Statement(sqlite3* db, const char* sql)
      : db_(db), stmt_(take_statement(db, sql)), ok_(stmt_ != nullptr) {}
  ~Statement() { give_statement(db_, stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  bool ok() const { return ok_; }
  Statement& bind(int i, const std::string& text) {
    sqlite3_bind_text(stmt_, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& bind(int i, std::int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  int step() { return sqlite3_step(stmt_); }
  // Ready to run again with new bindings.
  void reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  sqlite3_stmt* get() const { return stmt_; }
  std::string text(int col) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
    return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col)))
             : std::string();
  }
  std::int64_t integer(int col) const { return sqlite3_column_int64(stmt_, col); }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  bool ok_ = false;
};

}  // namespace kernex::server
