#include "kernex/skills/trust.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "kernex/json.hpp"
#include "kernex/skills/lock.hpp"
#include "text.hpp"

namespace fs = std::filesystem;

namespace kernex::skills {
namespace {

constexpr int kTrustVersion = 1;

bool overlaps(const fs::path& a, const fs::path& b) {
  auto within = [](const fs::path& inner, const fs::path& outer) {
    auto rel = inner.lexically_relative(outer);
    return !rel.empty() && *rel.begin() != "..";
  };
  return within(a, b) || within(b, a);
}

fs::path canonical_or_normal(const fs::path& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(fs::absolute(p, ec), ec);
  return ec ? fs::absolute(p).lexically_normal() : c;
}

// A shell word for the command the person is told to run.
std::string shell_word(const std::string& s) {
  const bool plain = std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
           std::strchr("/._-+@%=:,", c) != nullptr;
  });
  if (plain && !s.empty()) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// What a hash can't pin down: a link out of the folder reads a file the hash never saw, and a file
// with another hard link can be rewritten through that link while the folder is read-only.
Result<void> check_pinned(const fs::path& folder) {
  std::error_code ec;
  const fs::path base = fs::canonical(folder, ec);
  if (ec) return fail(ErrorCode::Io, "cannot resolve " + folder.string() + ": " + ec.message());
  for (fs::recursive_directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    const fs::file_status st = it->symlink_status(ec2);
    if (fs::is_symlink(st)) {
      const fs::path target = fs::weakly_canonical(it->path(), ec2);
      const fs::path rel = target.lexically_relative(base);
      if (ec2 || rel.empty() || *rel.begin() == "..") {
        return fail(ErrorCode::Skill,
                    it->path().string() + ": a symlink resolving outside the skill folder (" +
                        target.string() + "); a skill in a writable location must hold its files");
      }
    } else if (const auto links =
                   fs::is_regular_file(st) ? fs::hard_link_count(it->path(), ec2) : 1;
               !ec2 && links > 1) {
      return fail(ErrorCode::Skill,
                  it->path().string() +
                      ": has other hard links, through which it could be changed; copy it");
    }
  }
  if (ec) return fail(ErrorCode::Io, "cannot list " + folder.string() + ": " + ec.message());
  return {};
}

Result<void> write_atomically(const fs::path& file, const std::string& text) {
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  const fs::path tmp = file.string() + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return fail(ErrorCode::Io, "cannot write " + tmp.string() + ": " + std::strerror(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      fs::remove(tmp, ec);
      return fail(ErrorCode::Io, "cannot write " + tmp.string() + ": " + std::strerror(err));
    }
    done += static_cast<std::size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced)
    return fail(ErrorCode::Io, "cannot sync " + tmp.string() + ": " + std::strerror(errno));
  fs::rename(tmp, file, ec);  // a reader sees the old records or the new ones, never half
  if (ec) {
    fs::remove(tmp, ec);
    return fail(ErrorCode::Io, "cannot write " + file.string() + ": " + ec.message());
  }
  return {};
}

}  // namespace

std::string_view to_string(TrustState state) noexcept {
  switch (state) {
    case TrustState::NotRequired:
      return "not required";
    case TrustState::Trusted:
      return "trusted";
    case TrustState::Untrusted:
      return "untrusted";
    case TrustState::Changed:
      return "changed since trusted";
  }
  return "?";
}

std::optional<fs::path> writable_location(const fs::path& folder,
                                          const std::vector<fs::path>& writable) {
  const fs::path real = canonical_or_normal(folder);
  for (const auto& w : writable) {
    const fs::path dir = canonical_or_normal(w);
    if (real == dir || overlaps(real, dir)) return dir;
  }
  for (fs::path dir = real; !dir.empty(); dir = dir.parent_path()) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & S_IWOTH) != 0)
      return dir;
    if (dir == dir.root_path()) break;
  }
  return std::nullopt;
}

Result<std::string> trust_hash(const fs::path& folder) {
  KERNEX_RETURN_IF_ERROR(check_pinned(folder));
  KERNEX_ASSIGN_OR_RETURN(auto lock, compute_lock(folder));
  std::string text;
  for (const auto& [path, digest] : lock.files) text += path + '\0' + digest + '\n';
  // The lock file is left out of its own lock; here it counts like any other file.
  std::error_code ec;
  if (fs::exists(fs::symlink_status(folder / kLockFileName, ec))) {
    auto content = detail::read_file_capped((folder / kLockFileName).string(), 4 * 1024 * 1024);
    if (!content.error.empty() || content.too_large) {
      return fail(ErrorCode::Skill,
                  (folder / kLockFileName).string() + ": cannot read the lock file to hash it");
    }
    text += std::string(kLockFileName) + '\0' + sha256_hex(content.text) + '\n';
  }
  return sha256_hex(text);
}

Result<std::map<std::string, std::string>> read_trust_store(const fs::path& store) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(store, ec))) return out;
  auto content = detail::read_file_capped(store.string(), 16 * 1024 * 1024);
  auto bad = [&](const std::string& what) {
    return fail(ErrorCode::Skill, store.string() + ": " + what);
  };
  if (!content.error.empty()) return bad("cannot read: " + content.error);
  if (content.too_large) return bad("larger than 16 MiB");
  Json j = parse_untrusted(content.text);
  if (j.is_discarded() || !j.is_object())
    return bad("expected a JSON object written by `kernex skills trust`");
  if (!j.contains("version") || j["version"] != kTrustVersion) return bad("version: expected 1");
  if (!j.contains("skills") || !j["skills"].is_object())
    return bad("skills: expected an object of folder -> hash");
  for (const auto& [folder, hash] : j["skills"].items()) {
    if (!hash.is_string()) return bad("skills." + folder + ": expected a hex SHA-256 string");
    out[folder] = hash.get<std::string>();
  }
  return out;
}

Result<std::string> trust_skill(const fs::path& store, const fs::path& folder) {
  std::error_code ec;
  const fs::path real = fs::canonical(folder, ec);
  if (ec || !fs::is_directory(real, ec))
    return fail(ErrorCode::Skill, folder.string() + ": expected a skill folder");
  auto hash = trust_hash(real);
  if (!hash) return hash;
  KERNEX_ASSIGN_OR_RETURN(auto records, read_trust_store(store));
  (records)[real.string()] = *hash;
  Json j{{"version", kTrustVersion}, {"skills", records}};
  KERNEX_RETURN_IF_ERROR(write_atomically(store, j.dump(2) + "\n"));
  return hash;
}

Result<void> untrust_skills(const fs::path& store, const std::vector<std::string>& folders) {
  KERNEX_ASSIGN_OR_RETURN(auto records, read_trust_store(store));
  std::size_t erased = 0;
  for (const auto& f : folders) erased += records.erase(f);
  if (erased == 0) return {};
  Json j{{"version", kTrustVersion}, {"skills", records}};
  return write_atomically(store, j.dump(2) + "\n");
}

Result<TrustCheck> check_trust(const fs::path& folder, const TrustRule& rule) {
  TrustCheck out;
  out.location = writable_location(folder, rule.writable);
  if (!out.location) return out;
  const fs::path real = canonical_or_normal(folder);
  const std::string trust_command = "kernex skills trust " + shell_word(real.string());
  KERNEX_ASSIGN_OR_RETURN(auto records, read_trust_store(rule.store));
  auto hash = trust_hash(real);
  if (!hash) {
    out.state = TrustState::Untrusted;
    out.message = "the skill lies in the writable location " + out.location->string() +
                  " and can't be trusted: " + hash.error().message;
    return out;
  }
  auto it = records.find(real.string());
  if (it == records.end()) {
    out.state = TrustState::Untrusted;
    out.message =
        "the skill lies in the writable location " + out.location->string() +
        ", where a tool could have planted it, and is not trusted; review it, then run `" +
        trust_command + "`";
  } else if (it->second != *hash) {
    out.state = TrustState::Changed;
    out.message =
        "the skill's files changed since it was trusted (it lies in the writable location " +
        out.location->string() + "); review the changes, then run `" + trust_command + "` again";
  } else {
    out.state = TrustState::Trusted;
  }
  return out;
}

}  // namespace kernex::skills
