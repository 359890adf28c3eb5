#include "kernex/skills/lock.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <memory>

#include "kernex/files.hpp"
#include "text.hpp"

namespace fs = std::filesystem;

namespace kernex::skills {
namespace {

constexpr int kLockVersion = 1;

std::string hex(const unsigned char* bytes, unsigned int n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (unsigned int i = 0; i < n; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 0xF];
  }
  return out;
}

using DigestCtx = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

// Streams the file so that large assets never sit in memory.
Result<std::string> sha256_file(const fs::path& file) {
  KERNEX_ASSIGN_OR_RETURN(auto in, open_regular_file(file, "skill file"));
  DigestCtx ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return fail(ErrorCode::Internal, "OpenSSL could not start a SHA-256 digest");
  }
  std::array<char, 64 * 1024> buffer{};
  for (;;) {
    KERNEX_ASSIGN_OR_RETURN(auto n, in.read_some(buffer.data(), buffer.size()));
    if (n == 0) break;
    if (EVP_DigestUpdate(ctx.get(), buffer.data(), n) != 1)
      return fail(ErrorCode::Internal, "OpenSSL SHA-256 update failed on " + file.string());
  }
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx.get(), md.data(), &n) != 1)
    return fail(ErrorCode::Internal, "OpenSSL SHA-256 failed");
  return hex(md.data(), n);
}

std::string join(const std::vector<std::string>& items) { return detail::join(items); }

}  // namespace

std::string sha256_hex(std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md.data(), &n, EVP_sha256(), nullptr);
  return hex(md.data(), n);
}

Result<SkillLock> compute_lock(const fs::path& folder) {
  std::error_code ec;
  if (!fs::is_directory(folder, ec))
    return fail(ErrorCode::Skill, folder.string() + ": expected a skill folder");
  SkillLock lock;
  fs::recursive_directory_iterator it(folder, fs::directory_options::none, ec), end;
  if (ec) return fail(ErrorCode::Io, "cannot list " + folder.string() + ": " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) return fail(ErrorCode::Io, "cannot list " + folder.string() + ": " + ec.message());
    const fs::path& p = it->path();
    std::string rel = p.lexically_relative(folder).generic_string();
    std::error_code ec2;
    if (it->is_symlink(ec2)) {
      // Not followed: a link to a file outside the folder must not be hashed as if it were in it.
      fs::path target = fs::read_symlink(p, ec2);
      if (ec2)
        return fail(ErrorCode::Io, "cannot read the link " + p.string() + ": " + ec2.message());
      lock.files[rel] = "symlink:" + sha256_hex(target.string());
      continue;
    }
    if (it->is_directory(ec2)) continue;
    if (rel == kLockFileName) continue;
    if (!it->is_regular_file(ec2))
      return fail(ErrorCode::Skill, p.string() + ": expected a regular file, directory or link");
    KERNEX_ASSIGN_OR_RETURN(auto digest, sha256_file(p));
    lock.files[rel] = digest;
  }
  return lock;
}

Result<SkillLock> write_lock(const fs::path& folder) {
  auto lock = compute_lock(folder);
  if (!lock) return lock;
  Json j{{"version", kLockVersion}, {"algorithm", "sha256"}, {"files", lock->files}};
  const fs::path file = folder / kLockFileName;
  const fs::path tmp = folder / (std::string(kLockFileName) + ".tmp");
  std::error_code ec;
  // A leftover kernex.lock.tmp may be anything the folder's author put there (a FIFO would block
  // the open, a link would redirect the write): start from no file.
  fs::remove(tmp, ec);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << j.dump(2) << '\n';
    if (!out) return fail(ErrorCode::Io, "cannot write " + tmp.string());
  }
  fs::rename(tmp, file, ec);  // atomic: a reader never sees half a lock
  if (ec) return fail(ErrorCode::Io, "cannot write " + file.string() + ": " + ec.message());
  return lock;
}

Result<std::optional<SkillLock>> read_lock(const fs::path& folder) {
  const fs::path file = folder / kLockFileName;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(file, ec))) return std::optional<SkillLock>{};
  auto content = detail::read_file_capped(file.string(), 4 * 1024 * 1024);
  if (!content.error.empty())
    return fail(ErrorCode::Skill, file.string() + ": cannot read: " + content.error);
  if (content.too_large) return fail(ErrorCode::Skill, file.string() + ": larger than 4 MiB");
  Json j = parse_untrusted(content.text);
  auto bad = [&](const std::string& what) {
    return fail(ErrorCode::Skill, file.string() + ": " + what);
  };
  if (j.is_discarded() || !j.is_object())
    return bad("expected a JSON object written by `kernex skills lock`");
  if (!j.contains("version") || j["version"] != kLockVersion) return bad("version: expected 1");
  // Compared, never read with value(): a member of another type must not throw.
  if (!j.contains("algorithm") || j["algorithm"] != "sha256")
    return bad("algorithm: expected \"sha256\"");
  if (!j.contains("files") || !j["files"].is_object())
    return bad("files: expected an object of path -> SHA-256");
  SkillLock lock;
  for (const auto& [path, digest] : j["files"].items()) {
    if (!digest.is_string()) return bad("files." + path + ": expected a hex SHA-256 string");
    lock.files[path] = digest.get<std::string>();
  }
  return std::optional<SkillLock>(std::move(lock));
}

LockCheck compare(const SkillLock& locked, const SkillLock& actual) {
  LockCheck c;
  for (const auto& [path, digest] : locked.files) {
    auto it = actual.files.find(path);
    if (it == actual.files.end())
      c.missing.push_back(path);
    else if (it->second != digest)
      c.changed.push_back(path);
  }
  for (const auto& [path, digest] : actual.files) {
    if (!locked.files.contains(path)) c.extra.push_back(path);
  }
  return c;
}

Result<std::optional<LockCheck>> verify_lock(const fs::path& folder) {
  KERNEX_ASSIGN_OR_RETURN(auto locked, read_lock(folder));
  if (!locked) return std::optional<LockCheck>{};
  KERNEX_ASSIGN_OR_RETURN(auto actual, compute_lock(folder));
  return std::optional<LockCheck>(compare(*locked, actual));
}

std::string LockCheck::describe() const {
  std::vector<std::string> parts;
  if (!changed.empty()) parts.push_back("changed: " + join(changed));
  if (!missing.empty()) parts.push_back("missing: " + join(missing));
  if (!extra.empty()) parts.push_back("extra: " + join(extra));
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

Json to_json(const LockCheck& c) {
  return Json{{"ok", c.ok()}, {"changed", c.changed}, {"missing", c.missing}, {"extra", c.extra}};
}

}  // namespace kernex::skills
