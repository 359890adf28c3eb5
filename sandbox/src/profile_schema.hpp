// The field tables of a sandbox profile (kernex/config_fields.hpp): its keys, types, ranges,
// defaults and docs. profile_yaml.cpp refuses any other key through them.
#pragma once

#include <array>
#include <cstdint>
#include <limits>

#include "kernex/config_fields.hpp"

namespace kernex::sandbox::schema {

using config::Field;
using config::Section;
using enum config::FieldType;

inline constexpr std::uint64_t kU32 = std::numeric_limits<std::uint32_t>::max();
inline constexpr std::uint64_t kRlimitMax = std::numeric_limits<std::uint64_t>::max() / 2;

inline constexpr std::array kProfileFields{
    Field{"enforce", Bool, "apply the policy (false: run unconfined, for debugging)", "true"},
    Field{"system_defaults", Bool, "add the system's read-only and executable dirs", "true"},
    Field{"private_tmp", Bool, "a private /tmp per process", "false"},
    Field{"watch_files", Bool, "report writes outside the policy", "false"},
    Field{"git_writes", Bool, "allow writes under .git", "false"},
    Field{"workspace", Path, "read-write; the default working directory (absolute)", "unset"},
    Field{"working_dir", Path, "the working directory (absolute)", "the workspace"},
    Field{"read_only", List, "absolute paths readable", "[]"},
    Field{"read_write", List, "absolute paths readable and writable", "[]"},
    Field{"executable", List, "absolute paths readable and executable", "[]"},
    Field{"keep_read_only", List, "paths that stay read-only inside writable ones", "[]"},
    Field{"protected", List, "paths no sandboxed process may read or write", "[]"},
    Field{"search_path", List, "PATH of the sandboxed process", "[]"},
    Field{"stdout_cap", Integer, "bytes of stdout kept", "default", 0, kU32, {}, {}, {}, "bytes"},
    Field{"stderr_cap", Integer, "bytes of stderr kept", "default", 0, kU32, {}, {}, {}, "bytes"},
    Field{"network", Table, "'none' or {tcp_connect, unix, listen}", "none"},
    Field{"env", Table, "{base, passthrough, set, locale, malloc_huge_pages}"},
    Field{"limits", Table, "resource limits (setrlimit)"},
    Field{"allowed_commands", List, "commands the process may run; empty: any", "[]"},
    Field{.name = "timeout",
          .type = Number,
          .doc = "wall-clock limit in seconds, (0, 86400]",
          .number_min = 0,
          .number_max = 86'400,
          .unit = "s"},
};

inline constexpr std::array kNetworkFields{
    Field{"tcp_connect", List, "TCP ports the process may connect to", "[]"},
    Field{"unix", Bool, "allow AF_UNIX sockets", "false"},
    Field{"listen", Bool, "allow listening sockets", "false"},
};

inline constexpr std::array kEnvFields{
    Field{"base", List, "variables kept from the parent", "a safe default set"},
    Field{"passthrough", List, "more variables kept from the parent", "[]"},
    Field{"set", Options, "NAME: value pairs set", "{}"},
    Field{"locale", Bool, "also copy LC_*", "true"},
    Field{"malloc_huge_pages", Bool, "let malloc use huge pages", "false"},
};

inline constexpr std::array kLimitsFields{
    Field{"cpu_seconds", Integer, "RLIMIT_CPU", "unset", 0, kRlimitMax, {}, {}, {}, "s"},
    Field{"address_space", Integer, "RLIMIT_AS", "unset", 0, kRlimitMax, {}, {}, {}, "bytes"},
    Field{"processes", Integer, "RLIMIT_NPROC", "unset", 0, kRlimitMax},
    Field{"file_size", Integer, "RLIMIT_FSIZE", "unset", 0, kRlimitMax, {}, {}, {}, "bytes"},
    Field{"open_files", Integer, "RLIMIT_NOFILE", "unset", 0, kRlimitMax},
};

inline constexpr Section kProfile{"", kProfileFields};
inline constexpr Section kNetwork{"network", kNetworkFields};
inline constexpr Section kEnv{"env", kEnvFields};
inline constexpr Section kLimits{"limits", kLimitsFields};

}  // namespace kernex::sandbox::schema
