#include "kernex/server/keys.hpp"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <mutex>
#include <shared_mutex>
#include <unordered_set>

#include "kernex/file_lock.hpp"
#include "kernex/file_write.hpp"
#include "kernex/json.hpp"

namespace fs = std::filesystem;

namespace kernex::server {

using Digest = std::array<unsigned char, 32>;

struct FileStamp {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  std::int64_t mtime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};

struct StoredKey {
  KeyEntry entry;
  Digest digest{};
};

struct KeyStore::State {
  fs::path file;
  mutable std::shared_mutex mu;
  std::vector<StoredKey> keys;
  FileStamp stamp;
};

namespace {

constexpr int kKeysVersion = 1;
constexpr std::size_t kMaxKeysFile = 16 * 1024 * 1024;
constexpr std::size_t kKeyBytes = 32;

std::string errno_text(int err) { return std::strerror(err); }

FileStamp stamp_of(const struct stat& st) {
  return {true, st.st_dev, st.st_ino, st.st_size,
          static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

Digest sha256(std::string_view text) {
  Digest md{};
  unsigned int n = 0;
  EVP_Digest(text.data(), text.size(), md.data(), &n, EVP_sha256(), nullptr);
  return md;
}

std::string hex(const unsigned char* data, std::size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  for (std::size_t i = 0; i < size; ++i) {
    out += kDigits[data[i] >> 4];
    out += kDigits[data[i] & 0xF];
  }
  return out;
}

std::optional<Digest> digest_from_hex(std::string_view text) {
  if (text.size() != 64) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;  // upper case is refused too: the file is ours and always lower case
  };
  Digest out{};
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return out;
}

std::string base64url(const unsigned char* data, std::size_t size) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (std::size_t i = 0; i < size; ++i) {
    acc = (acc << 8) | data[i];
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out += kAlphabet[(acc >> bits) & 0x3F];
    }
  }
  if (bits > 0) out += kAlphabet[(acc << (6 - bits)) & 0x3F];
  return out;  // unpadded: the key is a bearer token, '=' only gets in the way
}

Result<void> random_bytes(unsigned char* out, std::size_t size) {
  if (RAND_bytes(out, static_cast<int>(size)) != 1) {
    return fail(ErrorCode::Internal, "OpenSSL RAND_bytes could not produce random bytes for a key");
  }
  return {};
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

bool valid_id(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (const char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  }
  return true;
}

// ---- reading ------------------------------------------------------------------------------

struct FileText {
  std::string text;
  FileStamp stamp;  // exists == false: no file
};

// Reads the keys file only if it is a regular file of ours that nobody else can access.
Result<FileText> read_private_file(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return FileText{};
    if (errno == ELOOP)
      return fail(ErrorCode::Config,
                  file.string() + ": is a symlink; expected a regular file, mode 0600");
    return fail(ErrorCode::Io, "cannot open " + file.string() + ": " + errno_text(errno));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return fail(ErrorCode::Io, "cannot stat " + file.string() + ": " + errno_text(errno));
  if (!S_ISREG(st.st_mode))
    return fail(ErrorCode::Config, file.string() + ": expected a regular file, mode 0600");
  if (st.st_uid != ::geteuid()) {
    return fail(ErrorCode::Config, file.string() + ": owned by uid " + std::to_string(st.st_uid) +
                                       ", not by this user (uid " + std::to_string(::geteuid()) +
                                       "); expected a keys file of ours with mode 0600");
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return fail(ErrorCode::Config, file.string() + ": accessible to group or others (mode " + mode +
                                       "); expected mode 0600 (chmod 600 " + file.string() + ")");
  }
  if (static_cast<std::size_t>(st.st_size) > kMaxKeysFile) {
    return fail(ErrorCode::Config, file.string() + ": larger than 16 MiB; expected a keys file");
  }
  FileText out;
  out.stamp = stamp_of(st);
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return fail(ErrorCode::Io, "cannot read " + file.string() + ": " + errno_text(errno));
    if (n == 0) break;
    out.text.append(buf, static_cast<std::size_t>(n));
    if (out.text.size() > kMaxKeysFile)
      return fail(ErrorCode::Config, file.string() + ": larger than 16 MiB");
  }
  return out;
}

Result<StoredKey> parse_entry(const Json& j, const std::string& where) {
  auto bad = [&](const std::string& what) { return fail(ErrorCode::Config, where + ": " + what); };
  if (!j.is_object()) return bad("expected an object {id, tenant, sha256, created, revoked?}");
  for (const auto& [key, value] : j.items()) {
    if (key != "id" && key != "tenant" && key != "sha256" && key != "created" && key != "revoked") {
      return bad("unknown field '" + key + "'; expected id, tenant, sha256, created, revoked");
    }
  }
  auto text = [&](const char* name) -> Result<std::string> {
    if (!j.contains(name) || !j[name].is_string())
      return bad(std::string(name) + ": expected a string");
    return j[name].get<std::string>();
  };
  StoredKey out;
  auto id = text("id"), tenant = text("tenant"), sha = text("sha256"), created = text("created");
  for (auto* r : {&id, &tenant, &sha, &created}) {
    if (!*r) return std::unexpected(r->error());
  }
  if (!valid_id(*id)) return bad("id: expected 1-64 characters of [A-Za-z0-9_-]");
  if (auto t = check_tenant_name(*tenant); !t) return bad("tenant: " + t.error().message);
  auto digest = digest_from_hex(*sha);
  if (!digest) return bad("sha256: expected 64 lower-case hex digits");
  out.entry = {*id, *tenant, *sha, *created, std::nullopt};
  out.digest = *digest;
  if (j.contains("revoked")) {
    auto revoked = text("revoked");
    if (!revoked) return std::unexpected(revoked.error());
    out.entry.revoked = *revoked;
  }
  return out;
}

Result<std::vector<StoredKey>> parse_keys(const fs::path& file, std::string_view text) {
  auto bad = [&](const std::string& what) {
    return fail(ErrorCode::Config, file.string() + ": " + what);
  };
  const Json j = parse_untrusted(text);
  if (j.is_discarded() || !j.is_object()) {
    return bad(
        "expected a JSON object {\"version\": 1, \"keys\": [...]} written by `kernex serve keys`");
  }
  for (const auto& [key, value] : j.items()) {
    if (key != "version" && key != "keys")
      return bad("unknown field '" + key + "'; expected version, keys");
  }
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"] != kKeysVersion) {
    return bad("version: expected 1");
  }
  if (!j.contains("keys") || !j["keys"].is_array())
    return bad("keys: expected an array of key entries");
  std::vector<StoredKey> out;
  std::unordered_set<std::string> ids;
  for (std::size_t i = 0; i < j["keys"].size(); ++i) {
    KERNEX_ASSIGN_OR_RETURN(
        auto entry, parse_entry(j["keys"][i], file.string() + ": keys[" + std::to_string(i) + "]"));
    if (!ids.insert(entry.entry.id).second)
      return bad("keys[" + std::to_string(i) + "].id: duplicate id");
    out.push_back(std::move(entry));
  }
  return out;
}

struct Loaded {
  std::vector<StoredKey> keys;
  FileStamp stamp;
};

Result<Loaded> read_keys(const fs::path& file) {
  auto content = read_private_file(file);
  if (!content) return std::unexpected(content.error());
  if (!content->stamp.exists) return Loaded{};
  KERNEX_ASSIGN_OR_RETURN(auto keys, parse_keys(file, content->text));
  return Loaded{std::move(keys), content->stamp};
}

// ---- writing ------------------------------------------------------------------------------

std::string serialise(const std::vector<StoredKey>& keys) {
  Json list = Json::array();
  for (const auto& k : keys) {
    Json e{{"id", k.entry.id},
           {"tenant", k.entry.tenant},
           {"sha256", k.entry.sha256},
           {"created", k.entry.created}};
    if (k.entry.revoked) e["revoked"] = *k.entry.revoked;
    list.push_back(std::move(e));
  }
  return Json{{"version", kKeysVersion}, {"keys", std::move(list)}}.dump(2) + "\n";
}

void sync_directory(const fs::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);  // best effort: the rename is durable once its directory is
  ::close(fd);
}

// Writes `text` to a fresh 0600 temporary beside `file`, syncs it and renames it over `file`, so a
// reader sees the old keys or the new ones, never half, and the secret digests are never exposed.
Result<FileStamp> write_atomically(const fs::path& file, const std::string& text) {
  const fs::path tmp = file.string() + ".tmp-" + std::to_string(::getpid());
  ::unlink(tmp.c_str());  // a leftover of a crashed writer; we hold the lock
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return fail(ErrorCode::Io, "cannot create " + tmp.string() + ": " + errno_text(errno));
  auto cleanup = [&](Error e) -> Result<FileStamp> {
    ::close(fd);
    ::unlink(tmp.c_str());
    return std::unexpected(std::move(e));
  };
  if (::fchmod(fd, 0600) != 0) return cleanup(Error(ErrorCode::Io, "cannot chmod " + tmp.string()));
  if (auto w = write_all(fd, text, tmp.string()); !w) return cleanup(w.error());
  if (::fsync(fd) != 0)
    return cleanup(Error(ErrorCode::Io, "cannot sync " + tmp.string() + ": " + errno_text(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) return cleanup(Error(ErrorCode::Io, "cannot stat " + tmp.string()));
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    return cleanup(
        Error(ErrorCode::Io, "cannot replace " + file.string() + ": " + errno_text(errno)));
  }
  ::close(fd);
  sync_directory(file.parent_path());
  return stamp_of(st);  // rename keeps the inode, size and mtime
}

}  // namespace

// ---- tenant names -------------------------------------------------------------------------

bool valid_tenant_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > 64 || name == "." || name == "..") return false;
  for (const char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-')
      return false;
  }
  return true;
}

Result<void> check_tenant_name(std::string_view name) {
  if (valid_tenant_name(name)) return {};
  return fail(ErrorCode::Usage,
              "tenant name '" + std::string(name).substr(0, 80) +
                  "': expected 1-64 characters of [A-Za-z0-9_.-], not '.' or '..'");
}

// ---- KeyStore -----------------------------------------------------------------------------

KeyStore::KeyStore(std::unique_ptr<State> state) : state_(std::move(state)) {}
KeyStore::KeyStore(KeyStore&&) noexcept = default;
KeyStore& KeyStore::operator=(KeyStore&&) noexcept = default;
KeyStore::~KeyStore() = default;

Result<KeyStore> KeyStore::load(fs::path file) {
  KERNEX_ASSIGN_OR_RETURN(auto loaded, read_keys(file));
  auto state = std::make_unique<State>();
  state->file = std::move(file);
  state->keys = std::move(loaded.keys);
  state->stamp = loaded.stamp;
  return KeyStore(std::move(state));
}

const fs::path& KeyStore::file() const noexcept { return state_->file; }

namespace {

// Re-reads the file under the write lock, applies `change` and saves, so keys written by another
// process since our last read survive.
template <class Change>
Result<std::size_t> modify(KeyStore::State& s, Change change) {
  std::error_code ec;
  if (!s.file.parent_path().empty()) fs::create_directories(s.file.parent_path(), ec);
  // Held to the end of this function (RETURN_IF_ERROR would drop it at once).
  KERNEX_ASSIGN_OR_RETURN(auto lock, FileLock::take(s.file.string() + ".lock"));
  KERNEX_ASSIGN_OR_RETURN(auto current, read_keys(s.file));
  auto changed = change(current.keys);
  if (!changed) return changed;
  auto stamp = write_atomically(s.file, serialise(current.keys));
  if (!stamp) return std::unexpected(stamp.error());
  std::unique_lock guard(s.mu);
  s.keys = std::move(current.keys);
  s.stamp = *stamp;
  return changed;
}

}  // namespace

Result<std::string> KeyStore::add(std::string_view tenant) {
  KERNEX_RETURN_IF_ERROR(check_tenant_name(tenant));
  std::array<unsigned char, kKeyBytes> secret{};
  std::array<unsigned char, 6> id_bytes{};
  KERNEX_RETURN_IF_ERROR(random_bytes(secret.data(), secret.size()));
  std::string key = "kx-" + base64url(secret.data(), secret.size());
  OPENSSL_cleanse(secret.data(), secret.size());
  StoredKey stored;
  stored.digest = sha256(key);
  stored.entry.tenant = std::string(tenant);
  stored.entry.sha256 = hex(stored.digest.data(), stored.digest.size());
  stored.entry.created = utc_now();
  auto done = modify(*state_, [&](std::vector<StoredKey>& keys) -> Result<std::size_t> {
    for (;;) {  // 48 random bits: a clash is rare, but the id must be unique in the file
      KERNEX_RETURN_IF_ERROR(random_bytes(id_bytes.data(), id_bytes.size()));
      stored.entry.id = hex(id_bytes.data(), id_bytes.size());
      bool clash = false;
      for (const auto& k : keys) clash = clash || k.entry.id == stored.entry.id;
      if (!clash) break;
    }
    keys.push_back(stored);
    return 1;
  });
  if (!done) return std::unexpected(done.error());
  return key;
}

std::vector<KeyEntry> KeyStore::list() const {
  std::shared_lock guard(state_->mu);
  std::vector<KeyEntry> out;
  out.reserve(state_->keys.size());
  for (const auto& k : state_->keys) out.push_back(k.entry);
  return out;
}

Result<std::size_t> KeyStore::revoke(std::string_view tenant) {
  KERNEX_RETURN_IF_ERROR(check_tenant_name(tenant));
  const std::string now = utc_now();
  return modify(*state_, [&](std::vector<StoredKey>& keys) -> Result<std::size_t> {
    std::size_t n = 0;
    for (auto& k : keys) {
      if (k.entry.tenant == tenant && !k.entry.revoked) {
        k.entry.revoked = now;
        ++n;
      }
    }
    return n;
  });
}

Result<std::size_t> KeyStore::revoke_id(std::string_view id) {
  if (!valid_id(id))
    return fail(ErrorCode::Usage, "key id: expected 1-64 characters of [A-Za-z0-9_-]");
  const std::string now = utc_now();
  return modify(*state_, [&](std::vector<StoredKey>& keys) -> Result<std::size_t> {
    for (auto& k : keys) {
      if (k.entry.id == id && !k.entry.revoked) {
        k.entry.revoked = now;
        return 1;
      }
    }
    return 0;
  });
}

std::optional<std::string> KeyStore::tenant_for(std::string_view presented_key) const {
  const Digest presented = sha256(presented_key);
  std::shared_lock guard(state_->mu);
  // Every entry is compared, whatever matched before, so the time taken doesn't tell which
  // (or whether an earlier) entry matched. Digests are unique in practice; the last match wins.
  const StoredKey* match = nullptr;
  for (const auto& k : state_->keys) {
    const bool equal = CRYPTO_memcmp(presented.data(), k.digest.data(), presented.size()) == 0;
    const bool usable = !k.entry.revoked.has_value();
    match = (equal && usable) ? &k : match;
  }
  if (match == nullptr) return std::nullopt;
  return match->entry.tenant;
}

Result<bool> KeyStore::reload_if_changed() {
  FileStamp now;
  struct stat st {};
  if (::lstat(state_->file.c_str(), &st) == 0) {
    now = stamp_of(st);
  } else if (errno != ENOENT) {
    return fail(ErrorCode::Io, "cannot stat " + state_->file.string() + ": " + errno_text(errno));
  }
  {
    std::shared_lock guard(state_->mu);
    if (now == state_->stamp) return false;
  }
  KERNEX_ASSIGN_OR_RETURN(auto loaded, read_keys(state_->file));
  std::unique_lock guard(state_->mu);
  state_->keys = std::move(loaded.keys);
  state_->stamp = loaded.stamp;
  return true;
}

}  // namespace kernex::server
