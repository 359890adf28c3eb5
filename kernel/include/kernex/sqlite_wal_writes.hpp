// A WAL commit's frames reach the file in one write. SQLite writes every frame of a commit with
// two pwrite calls (its 24-byte header, then its page): a turn's exchange is 13 pages, 26 system
// calls, about 50 µs on this VM against 5-9 µs for one write of the same bytes (measured).
//
// sqlite_wal_vfs() names a VFS that passes everything to the default one, except consecutive
// writes to a WAL file: those are held and written in one call when
//   1. the page of a commit frame arrives (its header carries the commit's database size): that
//      write returns the call's result, so a failure fails the commit exactly as before;
//   2. anything else touches that WAL file (read, sync, size, truncate, lock, close), a write does
//      not follow on, or 96 KiB are held;
//   3. any connection of this process locks or unlocks the database's wal-index (a spilled
//      transaction's frames, rolled back, are written before its write lock is released).
// A frame is published (the wal-index header) only after its commit frame, so no reader in this
// process or another sees a frame before it is in the file, and nothing SQLite acknowledges is
// held: xSync (synchronous=FULL) writes first. KERNEX_WAL_WRITES=each in the environment: the
// default VFS (the benches' baseline). Header-only: only code that links SQLite includes it.
#pragma once

#include <sqlite3.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace kernex {
namespace wal_writes {

struct File;

// The files of one database in this process: a wal-index lock on any of them writes what any of
// its WAL files hold.
struct Group {
  std::mutex mutex;              // the WAL files' held writes
  std::atomic<int> holding{0};   // WAL files holding writes
  std::vector<File*> wal_files;  // under mutex
  int users = 0;                 // open files (under the registry's mutex)
};

struct File {
  sqlite3_file base;  // first: SQLite sees this
  sqlite3_file* real = nullptr;
  Group* group = nullptr;
  bool wal = false;
  std::vector<char> held;  // WAL files: writes held since held_at (under group->mutex)
  sqlite3_int64 held_at = 0;
  bool commit_next = false;  // the last write held was a commit frame's header
};

// The unix VFS writes at most 128 KiB - 1 in one call (seekAndWriteFd masks the size with
// 0x1ffff): what is held stays below that.
inline constexpr std::size_t kMaxHeld = 96u << 10;
inline constexpr int kFrameHeader = 24;

inline File& of(sqlite3_file* f) { return *reinterpret_cast<File*>(f); }
inline sqlite3_file* real_of(sqlite3_file* f) { return of(f).real; }

class Registry {
 public:
  Group* join(const char* db_path) {
    std::lock_guard lock(mutex_);
    auto& g = groups_[db_path];
    if (!g) g = std::make_unique<Group>();
    ++g->users;
    return g.get();
  }
  void leave(Group* g) {
    std::lock_guard lock(mutex_);
    if (--g->users > 0) return;
    for (auto it = groups_.begin(); it != groups_.end(); ++it)
      if (it->second.get() == g) {
        groups_.erase(it);
        return;
      }
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Group>> groups_;
};

// Under f.group->mutex.
inline int write_held(File& f) {
  if (f.held.empty()) return SQLITE_OK;
  const int rc =
      f.real->pMethods->xWrite(f.real, f.held.data(), static_cast<int>(f.held.size()), f.held_at);
  f.held.clear();
  f.commit_next = false;
  f.group->holding.fetch_sub(1);
  return rc;
}

inline int flush(File& f) {
  if (!f.wal) return SQLITE_OK;
  std::lock_guard lock(f.group->mutex);
  return write_held(f);
}

inline int flush_group(Group* g) {
  if (g == nullptr || g->holding.load() == 0) return SQLITE_OK;
  std::lock_guard lock(g->mutex);
  int rc = SQLITE_OK;
  for (File* w : g->wal_files)
    if (const int r = write_held(*w); r != SQLITE_OK) rc = r;
  return rc;
}

inline bool commit_header(const void* data, int n) {
  if (n != kFrameHeader) return false;
  const auto* b = static_cast<const unsigned char*>(data);
  return (b[4] | b[5] | b[6] | b[7]) != 0;  // the database's size after a commit; 0 otherwise
}

inline int file_write(sqlite3_file* file, const void* data, int n, sqlite3_int64 at) {
  File& f = of(file);
  if (!f.wal) return f.real->pMethods->xWrite(f.real, data, n, at);
  std::lock_guard lock(f.group->mutex);
  const bool header = commit_header(data, n);
  const bool completes_commit = f.commit_next && !header;
  const bool follows =
      !f.held.empty() && at == f.held_at + static_cast<sqlite3_int64>(f.held.size());
  if (!f.held.empty() && (!follows || f.held.size() + static_cast<std::size_t>(n) > kMaxHeld)) {
    if (const int rc = write_held(f); rc != SQLITE_OK) return rc;
  }
  if (static_cast<std::size_t>(n) > kMaxHeld) return f.real->pMethods->xWrite(f.real, data, n, at);
  if (f.held.empty()) {
    f.held_at = at;
    f.group->holding.fetch_add(1);
  }
  const auto* bytes = static_cast<const char*>(data);
  f.held.insert(f.held.end(), bytes, bytes + n);
  f.commit_next = header;
  return completes_commit ? write_held(f) : SQLITE_OK;  // the commit frame is whole
}

inline Registry& registry() {
  static Registry r;
  return r;
}

// The wrapped methods: a WAL file writes what it holds before anything else.
template <auto Method, class... A>
int forward(sqlite3_file* f, A... a) {
  if (const int rc = flush(of(f)); rc != SQLITE_OK) return rc;
  return (real_of(f)->pMethods->*Method)(real_of(f), a...);
}

inline int file_close(sqlite3_file* file) {
  File& f = of(file);
  int rc = flush(f);
  if (f.group != nullptr) {
    if (f.wal) {
      std::lock_guard lock(f.group->mutex);
      std::erase(f.group->wal_files, &f);
    }
    registry().leave(f.group);
  }
  const int closed = f.real->pMethods ? f.real->pMethods->xClose(f.real) : SQLITE_OK;
  f.~File();
  return rc != SQLITE_OK ? rc : closed;
}

inline int shm_lock(sqlite3_file* file, int offset, int n, int flags) {
  if (const int rc = flush_group(of(file).group); rc != SQLITE_OK) return rc;
  return real_of(file)->pMethods->xShmLock(real_of(file), offset, n, flags);
}

inline const sqlite3_io_methods* methods() {
  static const sqlite3_io_methods m = [] {
    sqlite3_io_methods x{};
    x.iVersion = 3;
    x.xClose = file_close;
    x.xRead = forward<&sqlite3_io_methods::xRead, void*, int, sqlite3_int64>;
    x.xWrite = file_write;
    x.xTruncate = forward<&sqlite3_io_methods::xTruncate, sqlite3_int64>;
    x.xSync = forward<&sqlite3_io_methods::xSync, int>;
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

inline int file_open(sqlite3_vfs* vfs, sqlite3_filename name, sqlite3_file* file, int flags,
                     int* out_flags) {
  auto* f = new (file) File{};
  f->real = reinterpret_cast<sqlite3_file*>(reinterpret_cast<char*>(file) + kFileBytes);
  f->real->pMethods = nullptr;
  const int rc = real_vfs(vfs)->xOpen(real_vfs(vfs), name, f->real, flags, out_flags);
  if (f->real->pMethods == nullptr) {  // nothing to close: SQLite will not call xClose
    f->~File();
    file->pMethods = nullptr;
    return rc != SQLITE_OK ? rc : SQLITE_CANTOPEN;
  }
  f->base.pMethods = methods();
  if (rc != SQLITE_OK || name == nullptr) return rc;
  if (flags & SQLITE_OPEN_MAIN_DB) {
    f->group = registry().join(name);
  } else if (flags & SQLITE_OPEN_WAL) {
    f->group = registry().join(sqlite3_filename_database(name));
    f->wal = true;
    std::lock_guard lock(f->group->mutex);
    f->group->wal_files.push_back(f);
  }
  return rc;
}

class Vfs {
 public:
  Vfs() {
    sqlite3_vfs* real = sqlite3_vfs_find(nullptr);
    if (real == nullptr) return;
    name_ = "kernex-wal-writes-" + std::to_string(reinterpret_cast<std::uintptr_t>(this));
    vfs_.iVersion = 2;
    vfs_.szOsFile = kFileBytes + real->szOsFile;
    vfs_.mxPathname = real->mxPathname;
    vfs_.zName = name_.c_str();
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
  const char* name() const { return registered_ ? name_.c_str() : nullptr; }

 private:
  std::string name_;
  sqlite3_vfs vfs_{};
  bool registered_ = false;
};

}  // namespace wal_writes

// The VFS name to pass to sqlite3_open_v2 (nullptr: the default VFS, when KERNEX_WAL_WRITES=each
// or the VFS could not be registered). One per shared object that includes this header; it is
// unregistered when that object is unloaded.
inline const char* sqlite_wal_vfs() {
  static const bool each = [] {
    const char* v = std::getenv("KERNEX_WAL_WRITES");
    return v != nullptr && std::string_view(v) == "each";
  }();
  if (each) return nullptr;
  static wal_writes::Vfs vfs;
  return vfs.name();
}

}  // namespace kernex
