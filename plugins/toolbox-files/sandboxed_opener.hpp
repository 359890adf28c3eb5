// The fast path of the files toolbox's `read`: a long-lived process in the toolbox's own sandbox
// opens each file, and the kernel takes the open file over (pidfd_getfd) and reads it itself.
//
// Why this way, and not the kernel opening the file (openat2 RESOLVE_BENEATH from the
// workspace): what a sandboxed `cat` may read is decided by the whole policy, not by one root:
// Landlock's grants (the system paths and skill folders read-only, the workspace), the mount
// namespace (hidden kernel files masked inside the workspace, an overlay workspace's layers,
// the guarded .git) and seccomp. A kernel-side open would have to copy every one of those rules
// and keep them in step; an open made by a process under the very same policy follows them all
// by construction, symlinks and `..` included, and the kernel only ever holds a file that
// process could already read. A process that starts per read (cat) costs ~5 ms; this one starts
// once per policy and costs a pipe round trip per read.
//
// The opener is untrusted like anything in the sandbox: whatever fd number it names, the kernel
// checks what it took itself (a regular file, open for reading, on a filesystem whose reads are
// plain data: procfs, sysfs and the like answer per reader, so those go the slow way), every wait
// has a deadline and a stop token, and anything unexpected falls back to the per-read process.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>

#include "kernex/sandbox/policy.hpp"
#include "kernex/sandbox/process.hpp"
#include "kernex/sandbox/unique_fd.hpp"

namespace kernex::files {

using sandbox::UniqueFd;

// What an open in the sandbox gave.
struct Opened {
  enum class Kind {
    File,        // `fd`: a regular file on a plain-data filesystem, open for reading
    NotRegular,  // a FIFO, socket or device: refused (`what`: "a FIFO"...), never read
    Fallback,    // anything else (not found, denied, a directory, /proc, a busy or broken
                 // opener): the caller runs the per-read process, which answers as it always has
  };
  Kind kind = Kind::Fallback;
  UniqueFd fd;
  std::string what;
};

class SandboxedOpener {
 public:
  // Starts the opener under `policy`; null when it can't (no python3, a command allow-list
  // without it, no pidfd_getfd): reads then take the slow way.
  static std::shared_ptr<SandboxedOpener> start(const sandbox::Policy& policy);

  // Opens `path` (absolute) in the sandbox. Never waits on another call: a busy opener answers
  // Fallback. A stop request while waiting kills the opener (ErrorCode::Cancelled as the result).
  Result<Opened> open(const std::string& path, std::stop_token stop);

  // True once the opener died or broke the protocol: the owner starts another.
  bool broken() const;

 private:
  SandboxedOpener(sandbox::SandboxedProcess process, UniqueFd pidfd)
      : process_(std::move(process)), pidfd_(std::move(pidfd)) {}
  Opened take(int remote_fd);

  mutable std::mutex mutex_;
  sandbox::SandboxedProcess process_;
  UniqueFd pidfd_;
  bool broken_ = false;
};

// A whole file and how many '\n's it holds.
struct WholeFile {
  std::string text;
  std::size_t newlines = 0;
};

// The whole of the regular file `fd`, or nullopt when it holds more than `cap` bytes (read up to
// cap + 1, whatever its size said: the file may grow while read). Io on a read error.
Result<std::optional<WholeFile>> read_whole(int fd, std::size_t cap);

// The '\n's in `text`, 16 bytes a step: std::count goes a byte at a time (~100 ms for 2.5 MB in a
// debug build) and memchr per line costs a call per line (~0.3 ms here).
std::size_t count_newlines(std::string_view text);

}  // namespace kernex::files
