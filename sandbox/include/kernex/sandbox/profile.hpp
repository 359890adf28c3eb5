// What a sandboxed process may touch: plain data, loadable from YAML, turned into an enforceable
// Policy by PolicyBuilder::Build() (policy.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/error.hpp"

namespace kernex::sandbox {

// Network access. Default: nothing — socket() fails for every family (socketpair() still works).
struct NetworkPolicy {
  std::vector<std::uint16_t>
      tcp_connect_ports;      // non-empty: AF_INET/AF_INET6 TCP, connect to these ports only
  bool unix_sockets = false;  // allow socket(AF_UNIX) (reaches any socket file it can name)
  // Serving: allow listen(). Off, listen() fails with EPERM on every socket, so a command can't
  // accept connections (TCP's listen() would otherwise autobind an ephemeral port without bind(),
  // past Landlock's bind rules). On, TCP bind() stays refused by Landlock: an IP listener gets only
  // an ephemeral port; a unix listener binds a socket file where it may create one.
  bool listen = false;
  bool none() const { return tcp_connect_ports.empty() && !unix_sockets; }
};

// The child's environment starts empty. PATH is the policy's fixed search path, TMPDIR the private
// temporary directory; `base` names and `passthrough` names are copied from the spawning process
// when set there; `set` adds literal values. Names that can hijack execution (LD_*, PATH, BASH_ENV,
// NODE_OPTIONS, ...) are refused in `passthrough` and `set` (see is_hijacking_env_name).
struct EnvPolicy {
  std::vector<std::string> base = {"HOME", "LANG", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME"};
  bool pass_locale = true;  // also copy LC_* (locale only)
  std::vector<std::string> passthrough;
  std::map<std::string, std::string> set;
  // Sets GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (that fixed value only; the name stays refused in
  // `set` and `passthrough`): malloc backs large blocks with transparent huge pages, which cuts the
  // page faults of a program that loads a big input (on VMs where faults cost ~20 µs per 4 KiB).
  bool malloc_huge_pages = false;
};

// Resource limits applied with setrlimit in the child; unset means inherited.
struct ResourceLimits {
  std::optional<std::uint64_t> cpu_seconds;          // RLIMIT_CPU
  std::optional<std::uint64_t> address_space_bytes;  // RLIMIT_AS
  // Processes and threads of one spawn (256 unless a profile says otherwise): a per-spawn pids
  // cgroup when one can be created, else RLIMIT_NPROC (which counts all processes of the user and
  // exempts uid 0, so Build() refuses it for root without a cgroup). Every spawn also lives in a
  // PID namespace that dies with the kernel where the kernel may make one
  // (PolicyStatus::pid_namespace).
  std::optional<std::uint64_t> processes = 256;
  std::optional<std::uint64_t> file_size_bytes;  // RLIMIT_FSIZE
  std::optional<std::uint64_t> open_files;       // RLIMIT_NOFILE
};

// The workspace seen through overlayfs: the real directory is the lower layer and is never
// written; every write lands in `upper` (`work` is overlayfs's scratch directory, on the same
// filesystem). Both are kernel-owned (a session's layer under the data dir) and out of every
// tool's reach. Set by the host only, never read from a profile file.
struct WorkspaceOverlay {
  std::filesystem::path upper;
  std::filesystem::path work;

  // The layers a host keeps in one directory (Context::workspace_layers): `dir/upper`, `dir/work`.
  static WorkspaceOverlay in(const std::filesystem::path& dir) {
    return {dir / "upper", dir / "work"};
  }
};

struct SandboxProfile {
  // Grants. Directories cover everything below them (Landlock rules are a union), so a grant is
  // refused when it is, contains or lies inside a protected path.
  std::vector<std::filesystem::path> read_only;
  std::vector<std::filesystem::path> read_write;
  std::vector<std::filesystem::path> executable;   // read + execute
  std::optional<std::filesystem::path> workspace;  // read-write; default working directory
  // Set: the workspace is an overlay mount in the policy's namespace (needs `workspace` and
  // enforcement; refused, naming what is missing, where the kernel can't mount it).
  std::optional<WorkspaceOverlay> workspace_overlay;
  // Kept read-only even where they lie inside a writable grant (a skill folder inside the
  // workspace): bind-mounted read-only in the policy's private mount namespace, like .git/hooks.
  std::vector<std::filesystem::path> keep_read_only;
  // Every `.git` (directory or `gitdir:` file, with the gitdir and commondir it names) found in a
  // writable grant is read-only as a whole: its config, hooks, info, alternates and worktree links
  // make the user's next git command run code. true: git may write objects, refs, the index and
  // HEAD; what can name a program or another directory (config, config.worktree, commondir, gitdir,
  // hooks/, info/, objects/info/, worktrees/, and the same inside modules/*) stays read-only and
  // .git is pinned.
  bool git_writes = false;
  // The system's read-only/executable paths (system_read_only_paths(), system_exec_paths()) and a
  // private TMPDIR. Off: only what is listed above.
  bool system_defaults = true;
  bool private_tmp = true;

  // Never granted, nor any parent of them: ~/.ssh ~/.aws ~/.gnupg ~/.netrc and the other credential
  // stores in default_protected_paths(), plus these (the kernel adds its data dir, config, memory
  // DB).
  std::vector<std::filesystem::path> protected_paths;

  NetworkPolicy network;
  EnvPolicy env;

  // Allow inotify_init/inotify_init1. Off (default), they fail with EPERM: Landlock has no hook for
  // watches, so a watch would see activity in ~/.ssh and other paths the command can't open. On,
  // the command can watch any path it can look up. fanotify stays refused either way.
  bool watch_files = false;

  // kernex semantics (empty list allows every command; an entry with '/' must equal the resolved
  // absolute path; otherwise it must equal its basename), checked after resolving the command
  // against `search_path`. A non-empty list also limits Landlock EXECUTE to the listed programs
  // (plus the dynamic loader and their #! interpreters), so an allowed interpreter cannot exec
  // anything else. It decides what is started, not what code runs: the loader must stay executable,
  // so `ld.so <readable program>` still works — inside the same sandbox.
  std::vector<std::string> allowed_commands;
  std::vector<std::filesystem::path> search_path = {"/usr/local/bin", "/usr/bin", "/bin",
                                                    "/usr/sbin", "/sbin"};

  ResourceLimits limits;
  std::chrono::milliseconds timeout{120'000};
  std::size_t stdout_cap = 1 << 20;  // bytes kept; the rest is dropped and a marker appended
  std::size_t stderr_cap = 1 << 20;
  std::optional<std::filesystem::path> working_dir;  // default: workspace, else the private TMPDIR

  // false: spawn without Landlock/seccomp (logs a warning on every spawn). Never implicit.
  bool enforce = true;

  // YAML mapping (optionally wrapped in a top-level `sandbox:` key). Keys: enforce, workspace,
  // read_only, read_write, executable, keep_read_only, git_writes, system_defaults, private_tmp,
  // protected, network
  // (`none` or {tcp_connect: [ports], unix: bool, listen: bool}), watch_files,
  // env {base, passthrough, set, locale, malloc_huge_pages},
  // allowed_commands, search_path, limits {cpu_seconds, address_space, processes, file_size,
  // open_files}, timeout (seconds, may be fractional), stdout_cap, stderr_cap, working_dir.
  // Unknown keys and wrong types are errors naming `origin` and the key.
  static Result<SandboxProfile> from_yaml(std::string_view text, std::string_view origin);
  static Result<SandboxProfile> load_yaml_file(const std::filesystem::path& file);
};

// Names refused for passthrough and literal overrides because they change what runs or how.
bool is_hijacking_env_name(std::string_view name);

// ~/.ssh ~/.aws ~/.gnupg ~/.netrc ~/.kube ~/.docker ~/.config/gh ~/.config/gcloud ... for `home`.
std::vector<std::filesystem::path> default_protected_paths(const std::filesystem::path& home);

// Granted by system_defaults. /etc is not granted whole: as uid 0 the owner bits of /etc/shadow
// and host keys would make them readable; only the non-secret files programs need are listed.
std::vector<std::filesystem::path> system_read_only_paths();
std::vector<std::filesystem::path> system_exec_paths();

}  // namespace kernex::sandbox
