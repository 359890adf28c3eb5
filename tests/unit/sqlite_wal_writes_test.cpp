// kernex/sqlite_wal_writes.hpp: a WAL commit's frames reach the file in one write, and nothing a
// reader can see (in this process or another) or SQLite acknowledges is ever held: commits read
// back whole by other connections and a child process, a spilled transaction rolled back while
// another connection commits, a write that fails failing its commit, and kill -9 between
// acknowledged commits. Below the VFS sits a counting VFS (registered as the default first), so
// the tests see the writes that reach the file. Two connections through the VFS read and commit
// side by side, and a commit whose checksums SQLite rewrites in place is read whole.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "kernex/sqlite_wal_writes.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using kernex::testing::TempDir;

// The default VFS with its WAL writes counted, and failed on demand.
struct Counting {
  static inline sqlite3_vfs* unix_vfs = nullptr;
  static inline sqlite3_vfs vfs{};
  static inline sqlite3_io_methods methods{};
  static inline std::atomic<int> wal_writes{0};
  static inline std::atomic<bool> fail_wal_writes{false};
  static inline std::atomic<bool> check_barriers{false};
  static inline std::atomic<int> held_at_barrier{0};

  struct File {
    sqlite3_file base;
    sqlite3_file* real;
  };
  static sqlite3_file* real(sqlite3_file* f) { return reinterpret_cast<File*>(f)->real; }
  static const sqlite3_io_methods* M(sqlite3_file* f) { return real(f)->pMethods; }

  static void install() {
    if (unix_vfs != nullptr) return;
    unix_vfs = sqlite3_vfs_find(nullptr);
    vfs = *unix_vfs;
    vfs.zName = "kernex-test-counting";
    vfs.szOsFile = static_cast<int>(sizeof(File)) + 16 + unix_vfs->szOsFile;
    vfs.xOpen = [](sqlite3_vfs*, sqlite3_filename name, sqlite3_file* file, int flags, int* out) {
      auto* f = reinterpret_cast<File*>(file);
      f->real = reinterpret_cast<sqlite3_file*>(reinterpret_cast<char*>(file) + sizeof(File) + 16);
      f->real->pMethods = nullptr;
      const int rc = unix_vfs->xOpen(unix_vfs, name, f->real, flags, out);
      if (f->real->pMethods == nullptr) {
        file->pMethods = nullptr;
        return rc;
      }
      methods = *f->real->pMethods;
      methods.xClose = [](sqlite3_file* x) { return M(x)->xClose(real(x)); };
      methods.xRead = [](sqlite3_file* x, void* d, int n, sqlite3_int64 at) {
        return M(x)->xRead(real(x), d, n, at);
      };
      methods.xWrite = [](sqlite3_file* x, const void* d, int n, sqlite3_int64 at) {
        return M(x)->xWrite(real(x), d, n, at);
      };
      methods.xTruncate = [](sqlite3_file* x, sqlite3_int64 n) {
        return M(x)->xTruncate(real(x), n);
      };
      methods.xSync = [](sqlite3_file* x, int fl) { return M(x)->xSync(real(x), fl); };
      methods.xFileSize = [](sqlite3_file* x, sqlite3_int64* n) {
        return M(x)->xFileSize(real(x), n);
      };
      methods.xLock = [](sqlite3_file* x, int l) { return M(x)->xLock(real(x), l); };
      methods.xUnlock = [](sqlite3_file* x, int l) { return M(x)->xUnlock(real(x), l); };
      methods.xCheckReservedLock = [](sqlite3_file* x, int* r) {
        return M(x)->xCheckReservedLock(real(x), r);
      };
      methods.xFileControl = [](sqlite3_file* x, int op, void* a) {
        return M(x)->xFileControl(real(x), op, a);
      };
      methods.xSectorSize = [](sqlite3_file* x) { return M(x)->xSectorSize(real(x)); };
      methods.xDeviceCharacteristics = [](sqlite3_file* x) {
        return M(x)->xDeviceCharacteristics(real(x));
      };
      methods.xShmMap = [](sqlite3_file* x, int p, int s, int e, void volatile** m) {
        return M(x)->xShmMap(real(x), p, s, e, m);
      };
      methods.xShmLock = [](sqlite3_file* x, int o, int n, int fl) {
        return M(x)->xShmLock(real(x), o, n, fl);
      };
      methods.xShmBarrier = [](sqlite3_file* x) {
        // With one connection through the VFS, a barrier publishes a frame (or reads the
        // wal-index header between transactions): nothing may be held then.
        if (check_barriers.load() && kernex::wal_writes::held_bytes.load() != 0) ++held_at_barrier;
        M(x)->xShmBarrier(real(x));
      };
      methods.xShmUnmap = [](sqlite3_file* x, int d) { return M(x)->xShmUnmap(real(x), d); };
      methods.xFetch = [](sqlite3_file* x, sqlite3_int64 at, int n, void** p) {
        return M(x)->xFetch(real(x), at, n, p);
      };
      methods.xUnfetch = [](sqlite3_file* x, sqlite3_int64 at, void* p) {
        return M(x)->xUnfetch(real(x), at, p);
      };
      if (flags & SQLITE_OPEN_WAL) {
        static sqlite3_io_methods wal_methods;
        wal_methods = methods;
        wal_methods.xWrite = [](sqlite3_file* x, const void* d, int n, sqlite3_int64 at) {
          ++wal_writes;
          if (fail_wal_writes.load()) return SQLITE_FULL;
          return M(x)->xWrite(real(x), d, n, at);
        };
        file->pMethods = &wal_methods;
      } else {
        file->pMethods = &methods;
      }
      return rc;
    };
    sqlite3_vfs_register(&vfs, 1);  // the default: the VFS under test wraps it
  }
};

sqlite3* open_db(const fs::path& file, const char* vfs) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, vfs),
            SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  EXPECT_EQ(sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL", nullptr, nullptr,
                         nullptr),
            SQLITE_OK);
  return db;
}

int exec(sqlite3* db, const std::string& sql) {
  return sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
}

long long scalar(sqlite3* db, const char* sql) {
  sqlite3_stmt* st = nullptr;
  long long v = -1;
  if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

std::string text(sqlite3* db, const char* sql) {
  sqlite3_stmt* st = nullptr;
  std::string v;
  if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    v = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  return v;
}

// Rows of about `bytes` each, so a commit spans several pages.
std::string insert_rows(int first, int n, int bytes) {
  return "WITH RECURSIVE s(x) AS (SELECT " + std::to_string(first) +
         " UNION ALL SELECT x + 1 FROM s WHERE x < " + std::to_string(first + n - 1) +
         ") INSERT INTO t(id, v) SELECT x, randomblob(" + std::to_string(bytes) + ") FROM s";
}

// A forked child opens the file on its own (no connection crosses the fork: SQLite's lock
// bookkeeping is per process) and finds `rows` rows and an intact database.
bool a_child_reads_whole(const fs::path& file, long long rows) {
  const pid_t child = ::fork();
  if (child < 0) return false;
  if (child == 0) {
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) _exit(2);
    const bool ok =
        scalar(db, "SELECT count(*) FROM t") == rows && text(db, "PRAGMA integrity_check") == "ok";
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  return ::waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

class WalWrites : public ::testing::Test {
 protected:
  void SetUp() override {
    Counting::install();
    Counting::fail_wal_writes = false;
    Counting::check_barriers = true;
    Counting::held_at_barrier = 0;
    vfs = kernex::sqlite_wal_vfs();
    ASSERT_NE(vfs, nullptr) << "the VFS did not register";
    writer = open_db(file, vfs);
    ASSERT_EQ(exec(writer, "CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)"), SQLITE_OK);
  }
  void TearDown() override {
    EXPECT_EQ(Counting::held_at_barrier.load(), 0) << "a frame was published while held";
    Counting::fail_wal_writes = false;
    sqlite3_close_v2(writer);
  }
  TempDir dir;
  fs::path file = dir.path() / "wal.db";
  const char* vfs = nullptr;
  sqlite3* writer = nullptr;
};

TEST_F(WalWrites, ACommitsFramesReachTheFileInOneWrite) {
  ASSERT_EQ(exec(writer, insert_rows(1, 10, 100)), SQLITE_OK);  // the WAL's header written
  for (int round = 0; round < 5; ++round) {
    const int before = Counting::wal_writes.load();
    ASSERT_EQ(exec(writer, insert_rows(1000 + round * 40, 40, 1000)), SQLITE_OK);  // ~10 pages
    EXPECT_EQ(Counting::wal_writes.load() - before, 1) << "round " << round;
  }
  // A commit larger than the unix VFS writes in one call (128 KiB) goes in pieces, whole.
  ASSERT_EQ(exec(writer, insert_rows(20000, 120, 3000)), SQLITE_OK);
  sqlite3* reader = open_db(file, nullptr);
  EXPECT_EQ(scalar(reader, "SELECT count(*) FROM t WHERE id >= 20000 AND length(v) = 3000"), 120);
  sqlite3_close_v2(reader);
  // The same commit through the default VFS: two writes a frame.
  sqlite3* plain = open_db(file, nullptr);
  const int before = Counting::wal_writes.load();
  ASSERT_EQ(exec(plain, insert_rows(5000, 40, 1000)), SQLITE_OK);
  EXPECT_GE(Counting::wal_writes.load() - before, 20);
  sqlite3_close_v2(plain);
}

TEST_F(WalWrites, OtherConnectionsAndAChildProcessReadEveryCommitWhole) {
  sqlite3* reader = open_db(file, nullptr);
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(exec(writer, insert_rows(i * 20 + 1, 20, 700)), SQLITE_OK);
    ASSERT_EQ(scalar(reader, "SELECT count(*) FROM t"), (i + 1) * 20);
  }
  sqlite3_close_v2(reader);
  // No connection crosses the fork (SQLite's lock bookkeeping is per process).
  sqlite3_close_v2(writer);
  writer = nullptr;
  EXPECT_TRUE(a_child_reads_whole(file, 1000));
}

// A transaction larger than the page cache spills frames to the WAL before its commit; rolled
// back, they must be written before another connection takes the write lock and writes its own
// frames where they were. (SQLite's rollback reloads pages, which writes them while the lock is
// still held; the wal-index lock is the VFS's backstop.)
TEST_F(WalWrites, ASpilledTransactionRolledBackNeverOverwritesAnotherCommit) {
  ASSERT_EQ(exec(writer, "PRAGMA cache_size=5"), SQLITE_OK);
  sqlite3* other = open_db(file, nullptr);
  for (int round = 0; round < 5; ++round) {
    ASSERT_EQ(exec(writer, "BEGIN"), SQLITE_OK);
    ASSERT_EQ(exec(writer, insert_rows(100000 + round * 1000, 40, 900)), SQLITE_OK);  // spills
    ASSERT_EQ(exec(writer, "ROLLBACK"), SQLITE_OK);
    ASSERT_EQ(exec(other, insert_rows(round * 100 + 1, 100, 900)), SQLITE_OK);
    ASSERT_EQ(exec(writer, insert_rows(50000 + round * 10, 10, 900)), SQLITE_OK);
  }
  sqlite3_close_v2(other);
  sqlite3* check = open_db(file, nullptr);
  EXPECT_EQ(scalar(check, "SELECT count(*) FROM t"), 550);
  EXPECT_EQ(text(check, "PRAGMA integrity_check"), "ok");
  sqlite3_close_v2(check);
}

// Two connections through the VFS in one process, one committing, one reading all the while
// (each read locks the wal-index): every commit the reader sees is whole, the count row and the
// rows it counts always agree.
TEST_F(WalWrites, AReaderThroughTheVfsSeesOnlyWholeCommits) {
  ASSERT_EQ(exec(writer, "CREATE TABLE meta(n INTEGER); INSERT INTO meta VALUES (0)"), SQLITE_OK);
  Counting::check_barriers = false;  // two connections: one's barrier while the other holds
  std::atomic<bool> done{false};
  std::atomic<int> bad{0}, reads{0};
  std::thread reader([&] {
    sqlite3* db = open_db(file, vfs);
    while (!done.load()) {
      if (scalar(db,
                 "SELECT (SELECT count(*) FROM t) = (SELECT n FROM meta) AND "
                 "(SELECT count(*) FROM t WHERE length(v) != 700) = 0") != 1)
        ++bad;
      ++reads;
    }
    sqlite3_close_v2(db);
  });
  for (int i = 0; i < 200 || reads.load() < 50; ++i) {
    ASSERT_EQ(exec(writer, "BEGIN; " + insert_rows(i * 10 + 1, 10, 700) +
                               "; UPDATE meta SET n = n + 10; COMMIT"),
              SQLITE_OK);
  }
  done = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0) << "of " << reads.load() << " reads";
  EXPECT_EQ(text(writer, "PRAGMA integrity_check"), "ok");
}

// A transaction that spills frames, then changes a page it already spilled, is committed with its
// frames' checksums rewritten in place (SQLite's iReCksum path): a child process reads it whole.
TEST_F(WalWrites, ACommitWhoseChecksumsAreRewrittenIsReadWhole) {
  ASSERT_EQ(exec(writer, "PRAGMA cache_size=5"), SQLITE_OK);
  ASSERT_EQ(exec(writer, "BEGIN"), SQLITE_OK);
  ASSERT_EQ(exec(writer, insert_rows(1, 200, 900)), SQLITE_OK);
  ASSERT_EQ(exec(writer, "UPDATE t SET v = randomblob(900) WHERE id <= 5"), SQLITE_OK);
  ASSERT_EQ(exec(writer, insert_rows(1000, 5, 900)), SQLITE_OK);
  ASSERT_EQ(exec(writer, "COMMIT"), SQLITE_OK);
  sqlite3_close_v2(writer);  // no connection crosses the fork
  writer = nullptr;
  EXPECT_TRUE(a_child_reads_whole(file, 205));
}

TEST_F(WalWrites, AWriteThatFailsFailsItsCommit) {
  ASSERT_EQ(exec(writer, insert_rows(1, 10, 500)), SQLITE_OK);
  Counting::fail_wal_writes = true;
  EXPECT_NE(exec(writer, insert_rows(100, 40, 1000)), SQLITE_OK);
  Counting::fail_wal_writes = false;
  (void)exec(writer, "ROLLBACK");
  ASSERT_EQ(exec(writer, insert_rows(200, 10, 500)), SQLITE_OK);
  sqlite3* check = open_db(file, nullptr);
  EXPECT_EQ(scalar(check, "SELECT count(*) FROM t"), 20);
  EXPECT_EQ(text(check, "PRAGMA integrity_check"), "ok");
  sqlite3_close_v2(check);
}

// A child commits through the VFS and reports each acknowledged commit on a pipe; it is killed
// with -9 mid-stream. Every acknowledged commit is there, whole.
TEST_F(WalWrites, KillNineLosesNoAcknowledgedCommit) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  sqlite3_close_v2(writer);  // no connection crosses the fork
  writer = nullptr;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fds[0]);
    sqlite3* db = open_db(file, vfs);
    for (int i = 0;; ++i) {
      if (exec(db, insert_rows(1000 + i * 10, 10, 800)) != SQLITE_OK) _exit(3);
      if (::write(fds[1], &i, sizeof i) != sizeof i) _exit(4);
    }
  }
  ::close(fds[1]);
  int last = -1, got = 0;
  while (last < 200 && ::read(fds[0], &got, sizeof got) == sizeof got) last = got;
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  while (::read(fds[0], &got, sizeof got) == sizeof got) last = got;
  ::close(fds[0]);
  sqlite3* check = open_db(file, nullptr);
  EXPECT_GE(scalar(check, "SELECT count(*) FROM t WHERE id >= 1000"), (last + 1) * 10LL);
  EXPECT_EQ(text(check, "PRAGMA integrity_check"), "ok");
  sqlite3_close_v2(check);
}

}  // namespace
