// Saved skills and checkpoints in the kernel's data dir (saved_skills.hpp). Names and contents
// come from sandboxed code: each is checked before it names a path, every directory level is
// checked to be a real directory, files are made with O_EXCL|O_NOFOLLOW and land by rename.
#include "saved_skills.hpp"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <string_view>

#include "kernex/files.hpp"
#include "kernex/json.hpp"
#include "kernex/skills/lint.hpp"
#include "kernex/skills/trust.hpp"

namespace fs = std::filesystem;

namespace kernex::repl {
namespace {

constexpr std::array<std::string_view, 38> kKeywords = {
    "and",    "as",   "assert", "async",  "await",  "break",   "class",    "continue",
    "def",    "del",  "elif",   "else",   "except", "finally", "for",      "from",
    "global", "if",   "import", "in",     "is",     "lambda",  "nonlocal", "not",
    "or",     "pass", "raise",  "return", "try",    "while",   "with",     "yield",
    "match",  "case", "type",   "none",   "true",   "false"};

// Makes `dir` (0700) if missing; either way it must be a real directory, not a symlink to one.
Result<void> real_dir(const fs::path& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return fail(ErrorCode::Io, dir.string() + ": cannot make the directory");
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return fail(ErrorCode::Io, dir.string() + ": expected a directory, found " +
                                   std::string(file_kind(st.st_mode)) +
                                   "; refusing to write there");
  return {};
}

Result<void> write_new_file(const fs::path& path, const std::string& text, bool sync) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return fail(ErrorCode::Io, path.string() + ": cannot create the file");
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return fail(ErrorCode::Io, path.string() + ": write failed");
    }
    done += static_cast<std::size_t>(n);
  }
  const bool synced = !sync || ::fsync(fd) == 0;
  if (::close(fd) != 0 || !synced) return fail(ErrorCode::Io, path.string() + ": write failed");
  return {};
}

std::string quoted(const std::string& text) {
  return Json(text).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string skill_md(const std::string& name, const std::string& description) {
  return "---\nname: " + name + "\ndescription: " + quoted(description) + "\n---\n# " + name +
         "\n\nSaved by code in the REPL with save_skill(). Its code is " + name +
         ".py; once a person trusted this folder (`kernex skills trust <this folder>`), code in "
         "later runs imports it with `import skills." +
         name + "`.\n";
}

Result<std::string> description_problem(const std::string& description) {
  if (description.empty() || description.size() > kMaxSkillDescriptionChars * 4)
    return fail(ErrorCode::Tool, "save_skill: the description must be 1 to " +
                                     std::to_string(kMaxSkillDescriptionChars) + " characters");
  if (description.find_first_of(std::string_view("\0\n\r", 3)) != std::string::npos)
    return fail(ErrorCode::Tool, "save_skill: the description must be one line");
  return std::string();
}

// Puts the finished `staged` folder at `target`: an earlier real folder is moved aside and
// removed; anything else there (a symlink, a file) is refused, never followed.
Result<void> land(const fs::path& staged, const fs::path& target, const fs::path& scratch) {
  struct stat st {};
  if (::lstat(target.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      return fail(ErrorCode::Tool, "save_skill: " + target.string() + " is " +
                                       std::string(file_kind(st.st_mode)) +
                                       ", not a skill folder; refusing to replace it");
    const fs::path old = scratch / "old";
    if (::rename(target.c_str(), old.c_str()) != 0)
      return fail(ErrorCode::Io, "save_skill: cannot replace " + target.string());
  }
  if (::rename(staged.c_str(), target.c_str()) != 0)
    return fail(ErrorCode::Io, "save_skill: cannot move the skill to " + target.string());
  return {};
}

}  // namespace

std::string skill_name_problem(const std::string& name) {
  const bool shaped = !name.empty() && name.size() <= 64 && name[0] >= 'a' && name[0] <= 'z' &&
                      std::all_of(name.begin(), name.end(), [](char c) {
                        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
                      });
  if (!shaped)
    return "a skill's name must be 1 to 64 lowercase letters and digits, starting with a letter";
  if (std::find(kKeywords.begin(), kKeywords.end(), name) != kKeywords.end())
    return "'" + name + "' is a Python keyword and could not be imported";
  return {};
}

Result<fs::path> skills_area(const fs::path& data_dir, const std::string& tenant) {
  if (tenant.empty() || tenant.front() == '.' || tenant.find('/') != std::string::npos)
    return fail(ErrorCode::Tool, "save_skill: no skills area for tenant '" + tenant + "'");
  std::error_code ec;
  fs::create_directories(data_dir, ec);
  KERNEX_RETURN_IF_ERROR(real_dir(data_dir / "repl-skills"));
  KERNEX_RETURN_IF_ERROR(real_dir(data_dir / "repl-skills" / tenant));
  return data_dir / "repl-skills" / tenant;
}

Result<fs::path> save_skill(const fs::path& area, const std::string& name, const std::string& code,
                            const std::string& description) {
  if (auto problem = skill_name_problem(name); !problem.empty())
    return fail(ErrorCode::Tool, "save_skill: " + problem + " (got '" + name.substr(0, 80) + "')");
  if (code.size() > kMaxSkillCodeBytes)
    return fail(ErrorCode::Limit, "save_skill: the code is " + std::to_string(code.size()) +
                                      " bytes, more than the 1 MiB a saved skill may hold");
  if (code.find('\0') != std::string::npos)
    return fail(ErrorCode::Tool, "save_skill: the code must not contain NUL characters");
  KERNEX_RETURN_IF_ERROR(description_problem(description));
  std::string pattern = (area / ".save-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr)
    return fail(ErrorCode::Io, "save_skill: cannot make a scratch directory in " + area.string());
  const fs::path scratch = pattern;
  auto done = [&](Result<fs::path> r) {
    std::error_code ec;
    fs::remove_all(scratch, ec);  // never follows symlinks
    return r;
  };
  const fs::path staged = scratch / name;
  if (::mkdir(staged.c_str(), 0700) != 0)
    return done(fail(ErrorCode::Io, "save_skill: cannot make " + staged.string()));
  for (const auto& [file, text] : {std::pair{std::string("SKILL.md"), skill_md(name, description)},
                                   std::pair{name + ".py", code}}) {
    if (auto w = write_new_file(staged / file, text, true); !w)
      return done(std::unexpected(w.error()));
  }
  const skills::LintVerdict verdict = skills::lint_spec(staged);
  if (!verdict.valid)
    return done(fail(ErrorCode::Tool, "save_skill: not a valid skill: " + verdict.message));
  if (auto landed = land(staged, area / name, scratch); !landed)
    return done(std::unexpected(landed.error()));
  return done(area / name);
}

Result<void> write_skills_package(const fs::path& tree, const fs::path& area,
                                  const fs::path& trust_store) {
  const fs::path pkg = tree / "skills";
  KERNEX_RETURN_IF_ERROR(real_dir(pkg));
  Json untrusted = Json::object();
  std::error_code ec;
  auto records = skills::trust_records(trust_store);
  struct stat st {};
  const bool listed = ::lstat(area.c_str(), &st) == 0 && S_ISDIR(st.st_mode);  // no symlink
  for (fs::directory_iterator it = listed ? fs::directory_iterator(area, ec)
                                          : fs::directory_iterator(),
                              end;
       !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!skill_name_problem(name).empty() || !it->is_directory(ec) || it->is_symlink(ec)) continue;
    const fs::path folder = fs::weakly_canonical(it->path(), ec);
    bool trusted = false;
    if (records && *records) {
      const auto found = (*records)->find(folder.string());
      auto hash = skills::trust_hash(folder);
      trusted = found != (*records)->end() && hash && *hash == found->second;
    }
    auto code = trusted
                    ? read_regular_file(folder / (name + ".py"), "saved skill", kMaxSkillCodeBytes)
                    : Result<std::string>(std::string());
    if (!trusted || !code) {
      untrusted[name] = folder.string();
      continue;
    }
    KERNEX_RETURN_IF_ERROR(write_new_file(pkg / (name + ".py"), *code, false));
  }
  return write_new_file(pkg / "__init__.py",
                        "\"\"\"Skills saved with save_skill() and trusted by a person.\"\"\"\n"
                        "_UNTRUSTED = " +
                            untrusted.dump(-1, ' ', true, Json::error_handler_t::replace) + "\n",
                        false);
}

std::uint64_t saved_skills_fingerprint(const fs::path& area, const fs::path& trust_store) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&h](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  for (const fs::path* p : {&area, &trust_store}) {
    struct stat st {};
    if (::lstat(p->c_str(), &st) != 0) {
      mix(0);
      continue;
    }
    for (const std::uint64_t v :
         {static_cast<std::uint64_t>(st.st_ino), static_cast<std::uint64_t>(st.st_size),
          static_cast<std::uint64_t>(st.st_mtim.tv_sec),
          static_cast<std::uint64_t>(st.st_mtim.tv_nsec),
          static_cast<std::uint64_t>(st.st_ctim.tv_sec),
          static_cast<std::uint64_t>(st.st_ctim.tv_nsec)})
      mix(v);
  }
  return h;
}

Result<fs::path> checkpoint_file(const fs::path& data_dir, const std::string& tenant,
                                 const std::string& session) {
  if (tenant.empty() || tenant.front() == '.' || tenant.find('/') != std::string::npos ||
      session.empty() || session.size() > 120)
    return fs::path();  // no name for it on disk: kept in memory only
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name;
  for (const unsigned char c : session) {
    name += kHex[c >> 4];
    name += kHex[c & 15];
  }
  std::error_code ec;
  fs::create_directories(data_dir, ec);
  KERNEX_RETURN_IF_ERROR(real_dir(data_dir / "repl-checkpoints"));
  KERNEX_RETURN_IF_ERROR(real_dir(data_dir / "repl-checkpoints" / tenant));
  return data_dir / "repl-checkpoints" / tenant / (name + ".b64");
}

Result<void> write_checkpoint(const fs::path& file, const std::string& data) {
  std::string pattern = file.string() + ".XXXXXX";
  const int fd = ::mkstemp(pattern.data());
  if (fd < 0) return fail(ErrorCode::Io, "checkpoint: cannot write beside " + file.string());
  ::close(fd);
  ::unlink(pattern.c_str());  // made again with O_EXCL|O_NOFOLLOW: the name is ours alone
  if (auto w = write_new_file(pattern, data, true); !w) {
    ::unlink(pattern.c_str());
    return w;
  }
  if (::rename(pattern.c_str(), file.c_str()) != 0) {
    ::unlink(pattern.c_str());
    return fail(ErrorCode::Io, "checkpoint: cannot replace " + file.string());
  }
  return {};
}

Result<std::string> read_checkpoint(const fs::path& file, std::size_t max_bytes) {
  struct stat st {};
  if (::lstat(file.c_str(), &st) != 0) return std::string();
  if (!S_ISREG(st.st_mode))
    return fail(ErrorCode::Io, "restore: the checkpoint " + file.string() + " is " +
                                   std::string(file_kind(st.st_mode)) + ", not a file");
  return read_regular_file(file, "REPL checkpoint", max_bytes);
}

}  // namespace kernex::repl
