// Reading a SQLite file behind the store's back, through a connection of the test's own (another
// process, as it were), to check what the store wrote.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <string>

namespace kernex::testing {

// One integer of `sql` (its first row's first column); 0 when it gives no row, -1 on an error.
inline std::int64_t raw_int(const std::filesystem::path& file, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr);
  sqlite3_busy_timeout(db, 5000);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr);
  const int rc = sqlite3_step(st);
  const std::int64_t n = rc == SQLITE_ROW    ? sqlite3_column_int64(st, 0)
                         : rc == SQLITE_DONE ? 0
                                             : -1;
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n;
}

}  // namespace kernex::testing
