#include "sandboxed_opener.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <charconv>
#include <chrono>
#include <cstring>

#include "kernex/log.hpp"

namespace kernex::files {

namespace sb = kernex::sandbox;

namespace {

using Clock = std::chrono::steady_clock;

// A reply is "fd N" or "err E"; the first line is "ready N" (its stdin, taken over once to learn
// that pidfd_getfd works here). Opens never block: O_NONBLOCK, so a FIFO without a writer opens
// at once (and is refused by the kernel's fstat), and the previous file is closed first.
constexpr const char* kScript = R"(import os, sys
F = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
os.write(1, b"ready 0\n")
fd = -1
for line in sys.stdin.buffer:
    if fd >= 0:
        os.close(fd)
        fd = -1
    try:
        fd = os.open(line[:-1], F)
        out = b"fd %d\n" % fd
    except OSError as e:
        out = b"err %d\n" % e.errno
    os.write(1, out)
)";

constexpr std::size_t kMaxReply = 64;
constexpr auto kStartTimeout = std::chrono::seconds(20);
// An open of a local file answers in microseconds; past this the opener is taken for stuck (a
// hung network filesystem) and replaced, and the read takes the slow way.
constexpr auto kReplyTimeout = std::chrono::seconds(10);

// Filesystems whose reads return the file's bytes whoever reads them. procfs, sysfs, debugfs and
// the like compute a read's answer, some from the reader's credentials: the kernel never reads
// those for the sandbox.
bool plain_data_filesystem(int fd) {
  struct statfs fs {};
  if (::fstatfs(fd, &fs) != 0) return false;
  switch (static_cast<unsigned long>(fs.f_type)) {
    case 0xEF53:      // ext2/3/4
    case 0x58465342:  // xfs
    case 0x9123683E:  // btrfs
    case 0x01021994:  // tmpfs (and memfd)
    case 0x858458F6:  // ramfs
    case 0x794C7630:  // overlayfs
    case 0xF2F52010:  // f2fs
      return true;
    default:
      return false;
  }
}

const char* kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return nullptr;
}

// "<word> <non-negative int>", nothing else.
std::optional<int> reply_number(const std::string& line, std::string_view word) {
  if (!line.starts_with(word) || line.size() <= word.size() + 1 || line[word.size()] != ' ')
    return std::nullopt;
  int n = -1;
  const char* first = line.data() + word.size() + 1;
  const char* last = line.data() + line.size();
  auto [end, ec] = std::from_chars(first, last, n);
  if (ec != std::errc() || end != last || n < 0) return std::nullopt;
  return n;
}

// Fresh pages for a large buffer, faulted in by one call rather than one fault per 4 KiB page as
// the read touches them (on this VM 640 faults cost about as much as the 2.5 MB copy itself).
// Best effort: before Linux 5.14 it fails and the read faults them in as before.
void prefault(char* data, std::size_t size) {
  constexpr std::size_t kMin = 256 * 1024;
  if (size < kMin) return;
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = (reinterpret_cast<std::uintptr_t>(data) + page - 1) & ~(page - 1);
  const auto last = (reinterpret_cast<std::uintptr_t>(data) + size) & ~(page - 1);
  if (last > first)
    (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_POPULATE_WRITE);
}

UniqueFd take_fd(int pidfd, int remote) {
  return UniqueFd(static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, remote, 0)));
}

}  // namespace

std::shared_ptr<SandboxedOpener> SandboxedOpener::start(const sb::Policy& policy) {
  sb::Command command;
  command.argv = {"python3", "-I", "-S", "-c", kScript};
  auto process = sb::SandboxedProcess::start(policy, command);
  if (!process) {
    log(LogLevel::Debug,
        "files: no sandboxed opener (reads start a process each): " + process.error().describe());
    return nullptr;
  }
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, process->pid(), 0)));
  auto ready = process->read_line(Clock::now() + kStartTimeout, kMaxReply);
  if (!pidfd || !ready || reply_number(*ready, "ready") != 0 || !take_fd(pidfd.get(), 0)) {
    log(LogLevel::Debug, "files: the sandboxed opener did not start (reads start a process each)");
    return nullptr;
  }
  return std::shared_ptr<SandboxedOpener>(
      new SandboxedOpener(std::move(*process), std::move(pidfd)));
}

bool SandboxedOpener::broken() const {
  std::lock_guard lock(mutex_);
  return broken_;
}

Result<Opened> SandboxedOpener::open(const std::string& path, std::stop_token stop) {
  // The protocol is a line per path: a path with a newline or a NUL goes the slow way.
  if (path.empty() || path.find_first_of(std::string_view("\n\0", 2)) != std::string::npos)
    return Opened{};
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock() || broken_) return Opened{};
  auto give_up = [this] {
    broken_ = true;
    process_.kill();
  };
  const auto deadline = Clock::now() + kReplyTimeout;
  auto sent = process_.write(path + '\n', deadline, stop);
  auto reply = sent ? process_.read_line(deadline, kMaxReply, stop)
                    : Result<std::string>(std::unexpected(sent.error()));
  if (!reply) {
    give_up();
    if (reply.error().code == ErrorCode::Cancelled) return std::unexpected(reply.error());
    return Opened{};
  }
  if (reply_number(*reply, "err")) return Opened{};
  const auto remote = reply_number(*reply, "fd");
  if (!remote) {
    give_up();  // out of step
    return Opened{};
  }
  return take(*remote);
}

Opened SandboxedOpener::take(int remote_fd) {
  UniqueFd fd = take_fd(pidfd_.get(), remote_fd);
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0) return Opened{};
  if (const char* kind = kind_of(st.st_mode)) return Opened{Opened::Kind::NotRegular, {}, kind};
  if (!S_ISREG(st.st_mode)) return Opened{};
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || (flags & O_PATH) != 0 ||
      ((flags & O_ACCMODE) != O_RDONLY && (flags & O_ACCMODE) != O_RDWR))
    return Opened{};
  if (!plain_data_filesystem(fd.get())) return Opened{};
  return Opened{Opened::Kind::File, std::move(fd), {}};
}

std::size_t count_newlines(std::string_view text) {
  std::size_t n = 0, i = 0;
#if defined(__SSE2__)
  // Each byte lane counts its matches (cmpeq gives -1, subtracted) for up to 255 blocks, then one
  // _mm_sad_epu8 adds the lanes up: no per-block popcount (without -mpopcnt, a libgcc call per 16
  // bytes, which cost more than the scan).
  const __m128i newline = _mm_set1_epi8('\n');
  const __m128i zero = _mm_setzero_si128();
  while (i + 16 <= text.size()) {
    const std::size_t blocks = std::min<std::size_t>((text.size() - i) / 16, 255);
    __m128i lanes = zero;
    for (std::size_t b = 0; b < blocks; ++b, i += 16) {
      const __m128i chunk = _mm_loadu_si128(reinterpret_cast<const __m128i*>(text.data() + i));
      lanes = _mm_sub_epi8(lanes, _mm_cmpeq_epi8(chunk, newline));
    }
    const __m128i sums = _mm_sad_epu8(lanes, zero);
    n += static_cast<std::size_t>(_mm_cvtsi128_si32(sums)) +
         static_cast<std::size_t>(_mm_cvtsi128_si32(_mm_unpackhi_epi64(sums, sums)));
  }
#endif
  for (; i < text.size(); ++i) n += text[i] == '\n' ? 1 : 0;
  return n;
}

Result<std::optional<WholeFile>> read_whole(int fd, std::size_t cap) {
  cap = std::min<std::size_t>(cap, std::size_t{1} << 40);  // cap + 1 below must not wrap
  // Read a slice at a time and count its lines while it is still in the cache: counting the whole
  // text after the read fetched it all from memory again.
  constexpr std::size_t kSlice = 256 * 1024;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail(ErrorCode::Io, std::strerror(errno));
  // The size is a hint (the file may change): room for it and one byte more, grown as needed.
  std::size_t room =
      std::min<std::size_t>(static_cast<std::size_t>(std::max<off_t>(st.st_size, 0)), cap) + 1;
  WholeFile whole;
  std::size_t have = 0;
  for (;;) {
    int error = 0;
    whole.text.resize_and_overwrite(room, [&](char* data, std::size_t size) {
      prefault(data + have, size - have);
      while (have < size) {
        const std::size_t want = std::min(size - have, kSlice);
        const ssize_t n = ::pread(fd, data + have, want, static_cast<off_t>(have));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) error = errno;
        if (n <= 0) break;
        whole.newlines += count_newlines({data + have, static_cast<std::size_t>(n)});
        have += static_cast<std::size_t>(n);
      }
      return have;
    });
    if (error != 0) return fail(ErrorCode::Io, std::strerror(error));
    if (have > cap) return std::optional<WholeFile>();
    if (have < room) return std::optional<WholeFile>(std::move(whole));
    room = std::min(room * 2, cap + 1);
  }
}

}  // namespace kernex::files
