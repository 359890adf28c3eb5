// What an allow-list entry may name. A `permissions.commands` / `allowed_commands` entry or an MCP
// server command is a grant to execute one program, so it must resolve to a program: an ELF file,
// or a `#!` script whose interpreter is itself an executable file under the system's executable
// paths. Anything else (a directory, a data file or secret, a script naming a non-program, a file a
// sandbox could rewrite) would turn the grant into read access to something that is not a program.
#pragma once

#include <filesystem>
#include <optional>
#include <vector>

#include "kernex/error.hpp"

namespace kernex::sandbox {

struct ExecutableFile {
  std::filesystem::path path;                        // canonical: symlinks resolved
  std::optional<std::filesystem::path> interpreter;  // canonical `#!` interpreter of a script
};

// Checks `file` (absolute; symlinks are followed and judged by what they point at): it must be a
// regular file with an execute bit, writable by its owner only, with no world-writable directory on
// its path and not inside any of `writable` (directories a sandbox can write); and either an ELF
// file or a `#!` script whose interpreter passes the same checks and lies under
// system_exec_paths(). A missing file is ErrorCode::Io; every other refusal is ErrorCode::Sandbox,
// saying what was found.
Result<ExecutableFile> check_executable(const std::filesystem::path& file,
                                        const std::vector<std::filesystem::path>& writable = {});

// The first regular executable file `name` (no '/') names in `search`, as the spawner finds it.
std::optional<std::filesystem::path> find_program(const std::vector<std::filesystem::path>& search,
                                                  const std::string& name);

}  // namespace kernex::sandbox
