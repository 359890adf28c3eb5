// The trust records file (<data_dir>/trusted-skills.json): read once per process and again only
// when the file on disk is another one, so judging N skills costs one parse, not N; written under
// a lock with an atomic rename, so concurrent `kernex skills trust` runs lose no entry.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "kernex/files.hpp"
#include "kernex/json.hpp"
#include "kernex/skills/trust.hpp"

namespace fs = std::filesystem;

namespace kernex::skills {
namespace {

constexpr int kTrustVersion = 1;
constexpr std::size_t kMaxStoreBytes = std::size_t{64} << 20;  // ~500 000 records

// What tells one version of the file from another without reading it. A rename gives a new inode;
// a write in place moves ctime, which no unprivileged process can set back.
struct Identity {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  bool operator==(const Identity&) const = default;
};

Identity identity_of(const struct stat& st) {
  auto ns = [](const timespec& t) { return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec; };
  return {st.st_dev, st.st_ino, st.st_size, ns(st.st_mtim), ns(st.st_ctim)};
}

struct Cached {
  Identity id;
  std::shared_ptr<const TrustRecords> records;
};

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, Cached>& cache() {
  static std::map<std::string, Cached> c;
  return c;
}

Result<std::string> read_all(RegularFile& file, const fs::path& store) {
  if (file.size() > kMaxStoreBytes)
    return fail(ErrorCode::Skill, store.string() + ": larger than 64 MiB");
  std::string text;
  text.resize(static_cast<std::size_t>(file.size()) + 1);
  std::size_t done = 0;
  for (;;) {
    if (done == text.size()) {
      if (text.size() > kMaxStoreBytes)
        return fail(ErrorCode::Skill, store.string() + ": larger than 64 MiB");
      text.resize(text.size() * 2);
    }
    KERNEX_ASSIGN_OR_RETURN(auto n, file.read_some(text.data() + done, text.size() - done));
    if (n == 0) break;
    done += n;
  }
  text.resize(done);
  return text;
}

Result<TrustRecords> parse_store(const std::string& text, const fs::path& store) {
  auto bad = [&](const std::string& what) {
    return fail(ErrorCode::Skill, store.string() + ": " + what);
  };
  Json j = parse_untrusted(text);
  if (j.is_discarded() || !j.is_object())
    return bad("expected a JSON object written by `kernex skills trust`");
  if (!j.contains("version") || j["version"] != kTrustVersion) return bad("version: expected 1");
  if (!j.contains("skills") || !j["skills"].is_object())
    return bad("skills: expected an object of folder -> hash");
  TrustRecords out;
  for (const auto& [folder, hash] : j["skills"].items()) {
    if (!hash.is_string()) return bad("skills." + folder + ": expected a hex SHA-256 string");
    out.emplace(folder, hash.get<std::string>());
  }
  return out;
}

bool missing(const fs::path& store) {
  struct stat st {};
  return ::lstat(store.c_str(), &st) != 0 && errno == ENOENT;
}

// The records as the file holds them now; `use_cache` false reads them afresh (under the lock).
Result<std::shared_ptr<const TrustRecords>> load(const fs::path& store, bool use_cache) {
  if (missing(store)) return std::make_shared<const TrustRecords>();
  auto file = open_regular_file(store, "trust store");
  if (!file) return fail(ErrorCode::Skill, store.string() + ": cannot read", file.error());
  struct stat before {};
  if (::fstat(file->fd(), &before) != 0)
    return fail(ErrorCode::Io, store.string() + ": cannot stat: " + std::strerror(errno));
  const std::string key = store.string();
  if (use_cache) {
    std::lock_guard lock(cache_mutex());
    auto it = cache().find(key);
    if (it != cache().end() && it->second.id == identity_of(before)) return it->second.records;
  }
  KERNEX_ASSIGN_OR_RETURN(auto text, read_all(*file, store));
  KERNEX_ASSIGN_OR_RETURN(auto parsed, parse_store(text, store));
  auto records = std::make_shared<const TrustRecords>(std::move(parsed));
  struct stat after {};
  // A file written while it was read is not remembered: the next look reads it again.
  if (::fstat(file->fd(), &after) == 0 && identity_of(after) == identity_of(before)) {
    std::lock_guard lock(cache_mutex());
    cache()[key] = Cached{identity_of(before), records};
  }
  return records;
}

Result<void> write_fully(int fd, const std::string& text, const fs::path& tmp) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return fail(ErrorCode::Io, "cannot write " + tmp.string() + ": " + std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0)
    return fail(ErrorCode::Io, "cannot sync " + tmp.string() + ": " + std::strerror(errno));
  return {};
}

Result<void> write_atomically(const fs::path& file, const std::string& text) {
  static std::atomic<unsigned> counter{0};
  const fs::path tmp = file.string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                       std::to_string(counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return fail(ErrorCode::Io, "cannot write " + tmp.string() + ": " + std::strerror(errno));
  auto written = write_fully(fd, text, tmp);
  ::close(fd);
  std::error_code ec;
  if (written) fs::rename(tmp, file, ec);  // a reader sees the old records or the new ones
  if (!written || ec) {
    fs::remove(tmp, ec);
    if (!written) return written;
    return fail(ErrorCode::Io, "cannot write " + file.string() + ": " + ec.message());
  }
  // The rename itself is durable only once the directory is.
  if (const int dir = ::open(file.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return {};
}

// An exclusive lock on <store>.lock for one read-modify-write of the store.
class StoreLock {
 public:
  static Result<StoreLock> take(const fs::path& store) {
    const fs::path path = store.string() + ".lock";
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
      return fail(ErrorCode::Io, "cannot open " + path.string() + ": " + std::strerror(errno));
    while (::flock(fd, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return fail(ErrorCode::Io, "cannot lock " + path.string() + ": " + std::strerror(err));
    }
    return StoreLock(fd);
  }
  StoreLock(StoreLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  StoreLock& operator=(StoreLock&&) = delete;
  ~StoreLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }

 private:
  explicit StoreLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace

Result<std::shared_ptr<const TrustRecords>> trust_records(const fs::path& store) {
  return load(store, true);
}

Result<TrustRecords> read_trust_store(const fs::path& store) {
  KERNEX_ASSIGN_OR_RETURN(auto records, load(store, true));
  return *records;
}

namespace {

// One read-modify-write of the store under its lock; `change` returns false to leave it as is.
template <typename Change>
Result<void> rewrite(const fs::path& store, Change&& change) {
  std::error_code ec;
  fs::create_directories(store.parent_path(), ec);
  KERNEX_ASSIGN_OR_RETURN(auto lock, StoreLock::take(store));
  KERNEX_ASSIGN_OR_RETURN(auto current, load(store, false));
  TrustRecords records = *current;
  if (!change(records)) return {};
  Json j{{"version", kTrustVersion}, {"skills", records}};
  KERNEX_RETURN_IF_ERROR(write_atomically(store, j.dump(2) + "\n"));
  // A new file could reuse the old one's inode within one clock tick: forget it here for sure.
  std::lock_guard forget(cache_mutex());
  cache().erase(store.string());
  return {};
}

}  // namespace

Result<void> record_trust(const fs::path& store, const TrustRecords& added) {
  return rewrite(store, [&](TrustRecords& records) {
    for (const auto& [folder, hash] : added) records[folder] = hash;
    return true;
  });
}

Result<void> untrust_skills(const fs::path& store, const std::vector<std::string>& folders) {
  return rewrite(store, [&](TrustRecords& records) {
    std::size_t erased = 0;
    for (const auto& f : folders) erased += records.erase(f);
    return erased > 0;
  });
}

}  // namespace kernex::skills
