#include "sqlite_db.hpp"

#include <sys/stat.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernex/sqlite_wal_writes.hpp"
#include "kernex/file_lock.hpp"

namespace kernex::server {
namespace {
constexpr int kBusyTimeoutMs = 5000;
constexpr std::size_t kIdlePerText = 8;  // statements of one text kept idle per connection

// The idle statements of every open serve.db connection, by SQL text.
struct StatementCache {
  std::mutex mutex;
  std::unordered_map<sqlite3*, std::unordered_map<std::string, std::vector<sqlite3_stmt*>>> idle;
};
StatementCache& statements() {
  static StatementCache cache;
  return cache;
}
}  // namespace

sqlite3_stmt* take_statement(sqlite3* db, const char* sql) {
  auto& cache = statements();
  unsigned flags = 0;
  {
    std::lock_guard lock(cache.mutex);
    if (auto it = cache.idle.find(db); it != cache.idle.end()) {
      auto& free = it->second[sql];
      if (!free.empty()) {
        sqlite3_stmt* stmt = free.back();
        free.pop_back();
        return stmt;
      }
      flags = SQLITE_PREPARE_PERSISTENT;
    }
  }
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v3(db, sql, -1, flags, &stmt, nullptr) != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return nullptr;
  }
  return stmt;
}

// Kept by its own text (sqlite3_sql): the caller's may be gone by now.
void give_statement(sqlite3* db, sqlite3_stmt* stmt) {
  if (stmt == nullptr) return;
  sqlite3_reset(stmt);
  sqlite3_clear_bindings(stmt);
  auto& cache = statements();
  {
    std::lock_guard lock(cache.mutex);
    if (auto it = cache.idle.find(db); it != cache.idle.end()) {
      auto& free = it->second[sqlite3_sql(stmt)];
      if (free.size() < kIdlePerText) {
        free.push_back(stmt);
        return;
      }
    }
  }
  sqlite3_finalize(stmt);
}

void close_serve_db(sqlite3* db) {
  if (db == nullptr) return;
  std::unordered_map<std::string, std::vector<sqlite3_stmt*>> idle;
  {
    auto& cache = statements();
    std::lock_guard lock(cache.mutex);
    if (auto it = cache.idle.find(db); it != cache.idle.end()) {
      idle = std::move(it->second);
      cache.idle.erase(it);
    }
  }
  for (auto& [sql, stmts] : idle)
    for (auto* stmt : stmts) sqlite3_finalize(stmt);
  sqlite3_close(db);
}

std::unexpected<Error> db_error(sqlite3* db, const std::string& what) {
  return fail(ErrorCode::Io,
              "serve.db: " + what + ": " + (db ? sqlite3_errmsg(db) : "cannot open"));
}

Result<void> exec_sql(sqlite3* db, const char* sql) {
  char* message = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    std::string text = message ? message : "unknown error";
    sqlite3_free(message);
    return fail(ErrorCode::Io, std::string("serve.db: ") + text);
  }
  return {};
}

Result<sqlite3*> open_serve_db(const std::filesystem::path& file,
                               std::initializer_list<const char*> schema) {
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  // Servers started together on a new data dir would race to create the file, switch it to WAL
  // and create the tables; SQLite answers some of those races with "database is locked" whatever
  // the busy timeout. An flock beside the file serialises the whole first open.
  KERNEX_ASSIGN_OR_RETURN(auto opening, FileLock::take(file.string() + ".open-lock"));
  sqlite3* db = nullptr;
  const mode_t old = ::umask(077);  // runs hold users' messages: owner only
  const int rc = sqlite3_open_v2(file.c_str(), &db,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                                 sqlite_wal_vfs());
  ::umask(old);
  if (rc != SQLITE_OK) {
    auto e = db_error(db, "opening " + file.string());
    sqlite3_close(db);
    return e;
  }
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  // journal_mode=WAL may answer SQLITE_BUSY without calling the busy handler (another program
  // holding the file): retried within the busy timeout.
  for (int waited = 0, wal = 0;
       (wal = sqlite3_exec(db, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr)) != SQLITE_OK;
       waited += 10) {
    if ((wal & 0xff) != SQLITE_BUSY || waited >= kBusyTimeoutMs) {
      auto e = db_error(db, "switching " + file.string() + " to WAL");
      sqlite3_close(db);
      return e;
    }
    sqlite3_sleep(10);
  }
  // secure_delete: a forgotten session's rows are overwritten with zeros, not left in free pages.
  // temp_store=MEMORY: statement journals and sorts stay in memory, not in unlinked files under
  // /var/tmp (a write and a file creation each, and rows on disk outside the data dir).
  auto setup = std::vector<const char*>{"PRAGMA synchronous=NORMAL", "PRAGMA secure_delete=ON",
                                        "PRAGMA temp_store=MEMORY"};
  setup.insert(setup.end(), schema.begin(), schema.end());
  for (const char* sql : setup) {
    if (auto r = exec_sql(db, sql); !r) {
      sqlite3_close(db);
      return std::unexpected(r.error());
    }
  }
  {
    auto& cache = statements();
    std::lock_guard lock(cache.mutex);
    cache.idle[db];  // its statements are kept from now on
  }
  return db;
}

Result<void> truncate_wal(sqlite3* db) {
  int frames = 0, copied = 0;
  const int rc =
      sqlite3_wal_checkpoint_v2(db, nullptr, SQLITE_CHECKPOINT_TRUNCATE, &frames, &copied);
  if (rc != SQLITE_OK) return db_error(db, "checkpointing the WAL");
  return {};
}

}  // namespace kernex::server
