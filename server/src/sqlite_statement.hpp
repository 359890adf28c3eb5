// One prepared SQLite statement of serve.db, finalized on scope exit, and the error that names
// the database; shared by the run store and the webhook outbox, which use the same file.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "kernex/error.hpp"

namespace kernex::server {

inline std::unexpected<Error> db_error(sqlite3* db, const std::string& what) {
  return fail(ErrorCode::Io,
              "serve.db: " + what + ": " + (db ? sqlite3_errmsg(db) : "cannot open"));
}

class Statement {
 public:
  Statement(sqlite3* db, const char* sql) {
    ok_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) == SQLITE_OK;
  }
  ~Statement() { sqlite3_finalize(stmt_); }
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
  std::string text(int col) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
    return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col)))
             : std::string();
  }
  std::int64_t integer(int col) const { return sqlite3_column_int64(stmt_, col); }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  bool ok_ = false;
};

}  // namespace kernex::server
