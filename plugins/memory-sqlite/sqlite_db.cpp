#include "sqlite_db.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "kernex/sqlite_wal_writes.hpp"
#include "kernex/file_lock.hpp"

namespace kernex::sqlite {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

// Creates missing directories 0700 (only those we create: an existing parent keeps its mode).
Result<void> make_private_dirs(const std::filesystem::path& dir) {
  if (dir.empty()) return {};
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec)) return {};
  if (auto r = make_private_dirs(dir.parent_path()); !r) return r;
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return fail(ErrorCode::Io, "memory-sqlite: cannot create the data directory " + dir.string() +
                                   ": " + errno_text(errno));
  }
  return {};
}

}  // namespace

Stmt::~Stmt() {
  if (stmt_ != nullptr) {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
}

Stmt& Stmt::check(int rc) {
  if (rc != SQLITE_OK && bind_error_ == SQLITE_OK) bind_error_ = rc;
  return *this;
}

Stmt& Stmt::bind(int i, std::string_view v) {
  return check(sqlite3_bind_text64(stmt_, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
}
Stmt& Stmt::bind(int i, std::int64_t v) { return check(sqlite3_bind_int64(stmt_, i, v)); }
Stmt& Stmt::bind(int i, double v) { return check(sqlite3_bind_double(stmt_, i, v)); }
Stmt& Stmt::bind(int i, std::nullopt_t) { return check(sqlite3_bind_null(stmt_, i)); }

Result<bool> Stmt::step() {
  if (bind_error_ != SQLITE_OK) {
    return std::unexpected(Error(
        ErrorCode::Memory,
        std::string("memory-sqlite: binding a value failed: ") + sqlite3_errstr(bind_error_)));
  }
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return std::unexpected(db_->error(std::string("statement failed: ") + sqlite3_sql(stmt_)));
}

Result<std::uint64_t> Stmt::run() {
  for (;;) {
    KERNEX_ASSIGN_OR_RETURN(auto r, step());
    if (!r) break;
  }
  return static_cast<std::uint64_t>(sqlite3_changes64(db_->handle()));
}

std::string Stmt::text(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  return p == nullptr ? std::string()
                      : std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col)));
}
std::optional<std::string> Stmt::opt_text(int col) const {
  if (null(col)) return std::nullopt;
  return text(col);
}
std::int64_t Stmt::integer(int col) const { return sqlite3_column_int64(stmt_, col); }
double Stmt::real(int col) const { return sqlite3_column_double(stmt_, col); }
bool Stmt::null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

// "PRAGMA journal_mode=WAL" needs an exclusive lock and, on some paths, answers SQLITE_BUSY
// without calling the busy handler; retried here for as long as the busy timeout allows.
Result<void> Db::enter_wal(int busy_timeout_ms) {
  constexpr int kPauseMs = 10;
  for (int waited = 0;; waited += kPauseMs) {
    const int rc = sqlite3_exec(db_, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return {};
    if ((rc & 0xff) != SQLITE_BUSY || waited >= busy_timeout_ms)
      return std::unexpected(error("cannot switch the database to WAL"));
    sqlite3_sleep(kPauseMs);
  }
}

Result<std::unique_ptr<Db>> Db::open(const std::filesystem::path& path, const OpenOptions& options,
                                     Setup setup) {
  const bool in_memory = path == ":memory:";
  std::optional<FileLock> opening;
  if (!in_memory) {
    KERNEX_RETURN_IF_ERROR(make_private_dirs(path.parent_path()));
    KERNEX_ASSIGN_OR_RETURN(auto lock, FileLock::take(path.string() + ".open-lock"));
    opening.emplace(std::move(lock));
    // Exclusive create with 0600 so the file is never readable by others, even briefly.
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::close(fd);
    } else if (errno != EEXIST) {
      return fail(ErrorCode::Io, "memory-sqlite: cannot create the database " + path.string() +
                                     ": " + errno_text(errno));
    }
    if (::access(path.c_str(), R_OK | W_OK) != 0) {
      return fail(ErrorCode::Io, "memory-sqlite: the database " + path.string() +
                                     " is not writable: " + errno_text(errno));
    }
  }
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                                 sqlite_wal_vfs());
  std::unique_ptr<Db> db(new Db(raw, path));
  if (rc != SQLITE_OK) return std::unexpected(db->error("cannot open the database"));
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, options.busy_timeout_ms);
  KERNEX_RETURN_IF_ERROR(db->enter_wal(options.busy_timeout_ms));
  // secure_delete: deleted rows (a forgotten conversation) are overwritten, not left in free pages.
  // temp_store=MEMORY: statement journals and sorts never spill rows into files under /var/tmp.
  std::string pragmas =
      "PRAGMA foreign_keys=ON; PRAGMA secure_delete=ON; PRAGMA temp_store=MEMORY; "
      "PRAGMA synchronous=" +
      options.synchronous + ";";
  if (options.max_pages)
    pragmas += " PRAGMA max_page_count=" + std::to_string(*options.max_pages) + ";";
  KERNEX_RETURN_IF_ERROR(db->exec(pragmas.c_str()));
  if (setup != nullptr) KERNEX_RETURN_IF_ERROR(setup(*db));
  if (!in_memory) ::chmod(path.c_str(), 0600);
  return db;
}

Db::~Db() {
  for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
  sqlite3_close_v2(db_);
}

Result<Stmt> Db::prepare(const char* sql) {
  if (auto it = cache_.find(std::string_view(sql)); it != cache_.end())
    return Stmt(*this, it->second);
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr) != SQLITE_OK) {
    return std::unexpected(error(std::string("preparing a statement failed: ") + sql));
  }
  cache_.emplace(sql, stmt);
  return Stmt(*this, stmt);
}

Result<void> Db::exec(const char* sql) {
  char* msg = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &msg) != SQLITE_OK) {
    std::string text = msg ? msg : sqlite3_errmsg(db_);
    sqlite3_free(msg);
    const std::string head = std::string(sql).substr(0, 60);
    return fail(ErrorCode::Memory,
                "memory-sqlite: " + head + ": " + text + " (" + path_.string() + ")");
  }
  return {};
}

// Cached statements, not exec: every write pays these two, and exec parses them each time.
Result<void> Db::run_cached(const char* sql) {
  KERNEX_ASSIGN_OR_RETURN(auto stmt, prepare(sql));
  KERNEX_RETURN_IF_ERROR(stmt.run());
  return {};
}

Result<void> Db::begin() { return run_cached("BEGIN IMMEDIATE"); }
Result<void> Db::commit() { return run_cached("COMMIT"); }

void Db::rollback() {
  if (!sqlite3_get_autocommit(db_)) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

Error Db::error(std::string what) const {
  const int code = sqlite3_extended_errcode(db_);
  std::string msg = "memory-sqlite: " + what + ": " + sqlite3_errmsg(db_);
  if ((code & 0xff) == SQLITE_FULL) msg += " (the disk or the configured max_size_mb is full)";
  if ((code & 0xff) == SQLITE_READONLY || (code & 0xff) == SQLITE_CANTOPEN)
    msg += " (check the file's permissions)";
  return Error(ErrorCode::Memory, msg + " [" + path_.string() + "]");
}

}  // namespace kernex::sqlite
