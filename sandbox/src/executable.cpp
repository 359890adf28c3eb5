// check_executable(): an allow-list entry names one program, never a directory, a data file or a
// file a sandbox could rewrite.
#include "kernex/sandbox/executable.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string_view>

#include "kernex/files.hpp"
#include "kernex/sandbox/profile.hpp"

namespace kernex::sandbox {
namespace fs = std::filesystem;

namespace {

bool lexically_within(const fs::path& inner, const fs::path& outer) {
  auto rel = inner.lexically_relative(outer);
  return !rel.empty() && *rel.begin() != "..";
}

Error refused(const fs::path& given, const std::string& why) {
  return Error(ErrorCode::Sandbox, "'" + given.string() + "' is not a program: " + why);
}

// The file's own kind and mode, and the directories above it: a world-writable one (/tmp, /dev/shm)
// lets anyone swap the file.
Result<void> check_file(const fs::path& given, const fs::path& real,
                        const std::vector<fs::path>& writable) {
  struct stat st {};
  if (::stat(real.c_str(), &st) != 0) {
    return std::unexpected(
        refused(given, "cannot inspect " + real.string() + ": " + std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode))
    return std::unexpected(refused(given, real.string() + " is a directory"));
  if (!S_ISREG(st.st_mode))
    return std::unexpected(refused(given, real.string() + " is not a regular file"));
  if ((st.st_mode & 0111) == 0)
    return std::unexpected(refused(given, real.string() + " has no execute bit"));
  if ((st.st_mode & 022) != 0) {
    return std::unexpected(refused(given, real.string() + " is writable by group or others"));
  }
  for (const auto& w : writable) {
    if (lexically_within(real, w) || real == w) {
      return std::unexpected(
          refused(given, real.string() + " lies in " + w.string() + ", which a sandbox can write"));
    }
  }
  for (fs::path dir = real.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    struct stat ds {};
    if (::stat(dir.c_str(), &ds) == 0 && (ds.st_mode & S_IWOTH) != 0) {
      return std::unexpected(
          refused(given, real.string() + " lies in the world-writable directory " + dir.string()));
    }
    if (dir == dir.root_path()) break;
  }
  return {};
}

// The first line's program of a "#!" script ("" when the line names none), or nullopt for an ELF
// file.
Result<std::optional<std::string>> program_kind(const fs::path& given, const fs::path& real) {
  // Non-blocking and regular-file-only: a FIFO swapped in after check_file must not hang us.
  auto first = read_regular_file_head(real, "program", 255);
  if (!first) return std::unexpected(refused(given, first.error().message));
  std::string_view head(*first);
  if (head.starts_with("\x7f"
                       "ELF"))
    return std::optional<std::string>{};
  if (!head.starts_with("#!")) {
    return std::unexpected(
        refused(given, real.string() + " is neither an ELF program nor a `#!` script"));
  }
  head.remove_prefix(2);
  head = head.substr(0, head.find('\n'));
  const auto start = head.find_first_not_of(" \t");
  if (start == std::string_view::npos) return std::optional<std::string>(std::string());
  head.remove_prefix(start);
  return std::optional<std::string>(std::string(head.substr(0, head.find_first_of(" \t"))));
}

bool under_system_exec_paths(const fs::path& real) {
  for (const auto& dir : system_exec_paths()) {
    std::error_code ec;
    const fs::path sys = fs::canonical(dir, ec);
    if (!ec && lexically_within(real, sys)) return true;
  }
  return false;
}

}  // namespace

Result<ExecutableFile> check_executable(const fs::path& file,
                                        const std::vector<fs::path>& writable) {
  if (!file.is_absolute()) return std::unexpected(refused(file, "expected an absolute path"));
  std::error_code ec;
  const fs::path real = fs::canonical(file, ec);
  if (ec) return fail(ErrorCode::Io, "'" + file.string() + "' does not exist: " + ec.message());
  KERNEX_RETURN_IF_ERROR(check_file(file, real, writable));
  KERNEX_ASSIGN_OR_RETURN(auto kind, program_kind(file, real));
  ExecutableFile out{real, std::nullopt};
  if (!kind) return out;
  const std::string& interp = *kind;
  if (interp.empty() || interp.front() != '/') {
    return std::unexpected(refused(file, "its `#!` line names no absolute interpreter"));
  }
  const fs::path interp_real = fs::canonical(interp, ec);
  if (ec)
    return std::unexpected(refused(file, "its `#!` interpreter " + interp + " does not exist"));
  if (!under_system_exec_paths(interp_real)) {
    return std::unexpected(refused(file, "its `#!` interpreter " + interp + " (" +
                                             interp_real.string() +
                                             ") is not under the system's executable paths"));
  }
  if (auto r = check_file(file, interp_real, writable); !r) {
    return std::unexpected(refused(
        file, "its `#!` interpreter " + interp + " is not a program (" + r.error().message + ")"));
  }
  out.interpreter = interp_real;
  return out;
}

std::optional<fs::path> find_program(const std::vector<fs::path>& search, const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos) return std::nullopt;
  for (const auto& dir : search) {
    fs::path candidate = dir / name;
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec) && ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
  }
  return std::nullopt;
}

}  // namespace kernex::sandbox
