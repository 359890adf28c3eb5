// A WAL commit's frames reach the file in one write. SQLite writes every frame of a commit with
// two pwrite calls (its 24-byte header, then its page): a turn's exchange is 13 pages, 26 system
// calls, about 50 µs on this VM against 5-9 µs for one write of the same bytes (measured).
//
// sqlite_wal_vfs() names a VFS that passes everything to the default one, except a connection's
// appends to its WAL file: consecutive ones are held and written in one call when
//   1. the page of a commit frame arrives (the frame's header, written just before it, carries
//      the commit's database size): that write returns the call's result, so a failure fails the
//      commit exactly as before;
//   2. anything else touches that WAL file (read, sync, size, truncate, lock, close), a write does
//      not follow on, or 96 KiB are held (the unix VFS writes at most 128 KiB - 1 in one call);
//   3. the connection locks or unlocks its wal-index (a spilled transaction's frames, rolled back,
//      are written before its write lock goes).
// Rewrites are never held: a frame header rewritten where it was just read (its checksum, when
// a transaction overwrote a frame in place), and the rest of a frame split by a sync (sector
// padding). So a frame is in the file before the wal-index header publishes it, and before COMMIT
// returns: no reader in this process or another sees a frame that is not. A failed write of held
// bytes is returned by the call that made it, or by the file's next write, sync or lock.
// KERNEX_WAL_WRITES=each in the environment: the default VFS (the benches' baseline).
// Header-only: only code that links SQLite includes it.
#pragma once

#include <sqlite3.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string_view>
#include <type_traits>

namespace kernex {
namespace wal_writes {

inline constexpr std::size_t kMaxHeld = 96u << 10;
inline constexpr int kFrameHeader = 24;

// SQLite's file object, then ours. Standard layout, so a sqlite3_file* is a File*.
struct File {
  sqlite3_file base;
  sqlite3_file* real;
  File* wal;    // a main database file: its connection's WAL file, while open
  File* owner;  // a WAL file: its connection's main database file
  char* held;   // a WAL file: the writes held, kMaxHeld bytes (null: none are held)
  std::size_t held_size;
  sqlite3_int64 held_at;
  sqlite3_int64 commit_page_at;  // where the commit frame's page goes (-1: none pending)
  sqlite3_int64 last_read_at;
  bool after_sync;
  int failed;  // a held write that failed where no caller could be told: the next call's result
};
static_assert(std::is_standard_layout_v<File>);

// Bytes held by this VFS's WAL files now: whoever publishes a frame (xShmBarrier in
// walIndexWriteHdr) must find none of its own held, which the tests check.
inline std::atomic<std::int64_t> held_bytes{0};

inline File& of(sqlite3_file* f) { return *reinterpret_cast<File*>(f); }
inline sqlite3_file* real_of(sqlite3_file* f) { return of(f).real; }

inline int write_held(File& f) {
  if (f.held_size == 0) return SQLITE_OK;
  const int rc = f.real->pMethods->xWrite(f.real, f.held, static_cast<int>(f.held_size), f.held_at);
  held_bytes.fetch_sub(static_cast<std::int64_t>(f.held_size), std::memory_order_relaxed);
  f.held_size = 0;
  return rc;
}

// The file's own held bytes (and an earlier failure), before any other call on it.
inline int flush(File& f) {
  if (f.held == nullptr) return SQLITE_OK;
  if (const int rc = write_held(f); rc != SQLITE_OK) return rc;
  const int failed = f.failed;
  f.failed = SQLITE_OK;
  return failed;
}

inline bool commit_header(const void* data, int n) {
  if (n != kFrameHeader) return false;
  const auto* b = static_cast<const unsigned char*>(data);
  return (b[4] | b[5] | b[6] | b[7]) != 0;  // the database's size after a commit; 0 otherwise
}

inline int write_through(File& f, const void* data, int n, sqlite3_int64 at) {
  if (const int rc = flush(f); rc != SQLITE_OK) return rc;
  return f.real->pMethods->xWrite(f.real, data, n, at);
}

// Appends the write to what is held (writing that first when the write does not follow on).
inline int hold(File& f, const void* data, int n, sqlite3_int64 at) {
  const bool follows = at == f.held_at + static_cast<sqlite3_int64>(f.held_size);
  if (f.held_size > 0 && (!follows || f.held_size + static_cast<std::size_t>(n) > kMaxHeld)) {
    if (const int rc = flush(f); rc != SQLITE_OK) return rc;
  }
  if (f.held_size == 0) f.held_at = at;
  std::memcpy(f.held + f.held_size, data, static_cast<std::size_t>(n));
  f.held_size += static_cast<std::size_t>(n);
  held_bytes.fetch_add(n, std::memory_order_relaxed);
  return SQLITE_OK;
}

inline int file_write(sqlite3_file* file, const void* data, int n, sqlite3_int64 at) {
  File& f = of(file);
  if (f.held == nullptr || n <= 0) return write_through(f, data, n, at);
  // A header rewritten where it was just read, the rest of a frame a sync split, or a write too
  // big to hold: written now, after what is held.
  const bool now = (n == kFrameHeader && at == f.last_read_at) || f.after_sync ||
                   static_cast<std::size_t>(n) > kMaxHeld;
  f.after_sync = false;
  f.last_read_at = -1;
  int rc = now ? write_through(f, data, n, at) : hold(f, data, n, at);
  if (commit_header(data, n)) {
    f.commit_page_at = at + kFrameHeader;
  } else if (at == f.commit_page_at) {
    f.commit_page_at = -1;
    if (rc == SQLITE_OK) rc = flush(f);  // the commit frame is whole
  }
  return rc;
}

// The wrapped methods: a WAL file writes what it holds before anything else.
template <auto Method, class... A>
int forward(sqlite3_file* f, A... a) {
  if (const int rc = flush(of(f)); rc != SQLITE_OK) return rc;
  return (real_of(f)->pMethods->*Method)(real_of(f), a...);
}

inline int file_read(sqlite3_file* file, void* data, int n, sqlite3_int64 at) {
  of(file).last_read_at = at;
  return forward<&sqlite3_io_methods::xRead, void*, int, sqlite3_int64>(file, data, n, at);
}

inline int file_sync(sqlite3_file* file, int flags) {
  File& f = of(file);
  const int rc = forward<&sqlite3_io_methods::xSync, int>(file, flags);
  f.after_sync = f.held != nullptr;  // what follows may finish a frame the sync split
  return rc;
}

inline int file_close(sqlite3_file* file) {
  File& f = of(file);
  const int rc = flush(f);
  if (f.owner != nullptr) f.owner->wal = nullptr;
  if (f.wal != nullptr) f.wal->owner = nullptr;
  std::free(f.held);
  const int closed = f.real->pMethods->xClose(f.real);
  return rc != SQLITE_OK ? rc : closed;
}

// The connection's wal-index lock: its WAL's held bytes are written first. The lock call itself
// always goes on (SQLite ignores an unlock's result); a failed write is the WAL file's next
// call's result then.
inline int shm_lock(sqlite3_file* file, int offset, int n, int flags) {
  int rc = SQLITE_OK;
  if (File* wal = of(file).wal; wal != nullptr) {
    rc = write_held(*wal);
    if (rc != SQLITE_OK && (flags & SQLITE_SHM_UNLOCK)) {
      wal->failed = rc;
      rc = SQLITE_OK;
    }
  }
  if (rc != SQLITE_OK) return rc;
  return real_of(file)->pMethods->xShmLock(real_of(file), offset, n, flags);
}

inline const sqlite3_io_methods* methods() {
  static const sqlite3_io_methods m = [] {
    sqlite3_io_methods x{};
    x.iVersion = 3;
    x.xClose = file_close;
    x.xRead = file_read;
    x.xWrite = file_write;
    x.xTruncate = forward<&sqlite3_io_methods::xTruncate, sqlite3_int64>;
    x.xSync = file_sync;
    x.xFileSize = forward<&sqlite3_io_methods::xFileSize, sqlite3_int64*>;
    x.xLock = forward<&sqlite3_io_methods::xLock, int>;
    x.xUnlock = forward<&sqlite3_io_methods::xUnlock, int>;
    x.xCheckReservedLock = forward<&sqlite3_io_methods::xCheckReservedLock, int*>;
    x.xFileControl = forward<&sqlite3_io_methods::xFileControl, int, void*>;
    x.xSectorSize = [](sqlite3_file* f) { return real_of(f)->pMethods->xSectorSize(real_of(f)); };
    x.xDeviceCharacteristics = [](sqlite3_file* f) {
      return real_of(f)->pMethods->xDeviceCharacteristics(real_of(f));
    };
    x.xShmMap = forward<&sqlite3_io_methods::xShmMap, int, int, int, void volatile**>;
    x.xShmLock = shm_lock;
    x.xShmBarrier = [](sqlite3_file* f) { real_of(f)->pMethods->xShmBarrier(real_of(f)); };
    x.xShmUnmap = forward<&sqlite3_io_methods::xShmUnmap, int>;
    x.xFetch = forward<&sqlite3_io_methods::xFetch, sqlite3_int64, int, void**>;
    x.xUnfetch = forward<&sqlite3_io_methods::xUnfetch, sqlite3_int64, void*>;
    return x;
  }();
  return &m;
}

inline sqlite3_vfs* real_vfs(sqlite3_vfs* v) { return static_cast<sqlite3_vfs*>(v->pAppData); }

// The real file sits after File in the block SQLite allocates (szOsFile).
inline constexpr int kFileBytes = (sizeof(File) + 15) / 16 * 16;

// A WAL file of a connection whose database file is ours: linked both ways, with a buffer.
inline void link_wal(File& f, sqlite3_filename name) {
  sqlite3_file* db = sqlite3_database_file_object(name);
  if (db == nullptr || db->pMethods != methods()) return;
  f.held = static_cast<char*>(std::malloc(kMaxHeld));
  if (f.held == nullptr) return;  // no memory: nothing held, every write goes through
  f.owner = &of(db);
  f.owner->wal = &f;
}

inline int file_open(sqlite3_vfs* vfs, sqlite3_filename name, sqlite3_file* file, int flags,
                     int* out_flags) {
  auto* f = new (file) File{};
  f->real = reinterpret_cast<sqlite3_file*>(reinterpret_cast<char*>(file) + kFileBytes);
  f->real->pMethods = nullptr;
  f->commit_page_at = f->last_read_at = -1;
  const int rc = real_vfs(vfs)->xOpen(real_vfs(vfs), name, f->real, flags, out_flags);
  if (f->real->pMethods == nullptr) {  // nothing to close: SQLite will not call xClose
    file->pMethods = nullptr;
    return rc != SQLITE_OK ? rc : SQLITE_CANTOPEN;
  }
  f->base.pMethods = methods();
  if (rc == SQLITE_OK && name != nullptr && (flags & SQLITE_OPEN_WAL)) link_wal(*f, name);
  return rc;
}

// Registered once per shared object that includes this header, unregistered when that object is
// unloaded (its stores are closed first) or the process exits. Its members are trivially
// destructible, so a connection some other static closes later still finds them in place.
class Vfs {
 public:
  Vfs() {
    sqlite3_vfs* real = sqlite3_vfs_find(nullptr);
    if (real == nullptr) return;
    std::snprintf(name_, sizeof name_, "kernex-wal-writes-%p", static_cast<void*>(this));
    vfs_.iVersion = 2;
    vfs_.szOsFile = kFileBytes + real->szOsFile;
    vfs_.mxPathname = real->mxPathname;
    vfs_.zName = name_;
    vfs_.pAppData = real;
    vfs_.xOpen = file_open;
    vfs_.xDelete = [](sqlite3_vfs* v, const char* n, int d) {
      return real_vfs(v)->xDelete(real_vfs(v), n, d);
    };
    vfs_.xAccess = [](sqlite3_vfs* v, const char* n, int fl, int* out) {
      return real_vfs(v)->xAccess(real_vfs(v), n, fl, out);
    };
    vfs_.xFullPathname = [](sqlite3_vfs* v, const char* n, int size, char* out) {
      return real_vfs(v)->xFullPathname(real_vfs(v), n, size, out);
    };
    vfs_.xDlOpen = [](sqlite3_vfs* v, const char* n) {
      return real_vfs(v)->xDlOpen(real_vfs(v), n);
    };
    vfs_.xDlError = [](sqlite3_vfs* v, int size, char* out) {
      real_vfs(v)->xDlError(real_vfs(v), size, out);
    };
    vfs_.xDlSym = [](sqlite3_vfs* v, void* h, const char* s) {
      return real_vfs(v)->xDlSym(real_vfs(v), h, s);
    };
    vfs_.xDlClose = [](sqlite3_vfs* v, void* h) { real_vfs(v)->xDlClose(real_vfs(v), h); };
    vfs_.xRandomness = [](sqlite3_vfs* v, int size, char* out) {
      return real_vfs(v)->xRandomness(real_vfs(v), size, out);
    };
    vfs_.xSleep = [](sqlite3_vfs* v, int us) { return real_vfs(v)->xSleep(real_vfs(v), us); };
    vfs_.xCurrentTime = [](sqlite3_vfs* v, double* t) {
      return real_vfs(v)->xCurrentTime(real_vfs(v), t);
    };
    vfs_.xGetLastError = [](sqlite3_vfs* v, int size, char* out) {
      return real_vfs(v)->xGetLastError(real_vfs(v), size, out);
    };
    vfs_.xCurrentTimeInt64 = [](sqlite3_vfs* v, sqlite3_int64* t) {
      return real_vfs(v)->iVersion >= 2 && real_vfs(v)->xCurrentTimeInt64
                 ? real_vfs(v)->xCurrentTimeInt64(real_vfs(v), t)
                 : SQLITE_ERROR;
    };
    registered_ = sqlite3_vfs_register(&vfs_, 0) == SQLITE_OK;
  }
  ~Vfs() {
    if (registered_) sqlite3_vfs_unregister(&vfs_);
  }
  Vfs(const Vfs&) = delete;
  Vfs& operator=(const Vfs&) = delete;
  const char* name() const { return registered_ ? name_ : nullptr; }

 private:
  char name_[64] = {};
  sqlite3_vfs vfs_{};
  bool registered_ = false;
};

}  // namespace wal_writes

// The VFS name to pass to sqlite3_open_v2 (nullptr: the default VFS, when KERNEX_WAL_WRITES=each
// or the VFS could not be registered).
inline const char* sqlite_wal_vfs() {
  static const char* const name = []() -> const char* {
    const char* v = std::getenv("KERNEX_WAL_WRITES");
    if (v != nullptr && std::string_view(v) == "each") return nullptr;
    static wal_writes::Vfs vfs;
    return vfs.name();
  }();
  return name;
}

}  // namespace kernex
