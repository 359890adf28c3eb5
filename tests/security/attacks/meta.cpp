// Attack program for the metadata class of the second battery: `meta <case> <path> [mode]` changes
// the mode, group, times, size or name of a file it does not hold a write grant for (Landlock has
// no right for chmod, chown or utimensat). Prints "OK" when the change worked, else "<step>:<errno
// name>".
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452
#endif

namespace {

int report(long rc, const char* step) {
  if (rc >= 0) {
    std::printf("OK\n");
    return 0;
  }
  const char* name = strerrorname_np(errno);
  std::printf("%s:%s\n", step, name != nullptr ? name : "?");
  return 0;
}

// An fd of `path` opened with `flags`, or -1 after reporting the failed open.
int open_or_report(const char* path, int flags) {
  int fd = ::open(path, flags | O_CLOEXEC);
  if (fd < 0) report(-1, "open");
  return fd;
}

const timespec kEpoch[2] = {{1, 0}, {1, 0}};

int run(const std::string& what, const char* path, mode_t mode) {
  const gid_t gid = ::getgid();
  if (what == "chmod") return report(::chmod(path, mode), "chmod");
  if (what == "fchmodat") return report(::fchmodat(AT_FDCWD, path, mode, 0), "fchmodat");
  if (what == "fchmodat2-nofollow") {
    return report(::syscall(SYS_fchmodat2, AT_FDCWD, path, mode, AT_SYMLINK_NOFOLLOW), "fchmodat2");
  }
  if (what == "chown-group") return report(::chown(path, static_cast<uid_t>(-1), gid), "chown");
  if (what == "lchown-group") return report(::lchown(path, static_cast<uid_t>(-1), gid), "lchown");
  if (what == "fchownat-group") {
    return report(::fchownat(AT_FDCWD, path, static_cast<uid_t>(-1), gid, AT_SYMLINK_NOFOLLOW),
                  "fchownat");
  }
  if (what == "utimensat-now") return report(::utimensat(AT_FDCWD, path, nullptr, 0), "utimensat");
  if (what == "utimensat-epoch") return report(::utimensat(AT_FDCWD, path, kEpoch, 0), "utimensat");
  if (what == "utimes") {
    const timeval tv[2] = {{1, 0}, {1, 0}};
    return report(::utimes(path, tv), "utimes");
  }
  if (what == "truncate") return report(::truncate(path, 0), "truncate");
  if (what == "open-trunc") return report(::open(path, O_WRONLY | O_TRUNC | O_CLOEXEC), "open");
  if (what == "rename-self") return report(::rename(path, path), "rename");
  if (what == "link-beside")
    return report(::link(path, (std::string(path) + ".link").c_str()), "link");
  // Through a file descriptor: one opened for reading (where the grant allows it), or O_PATH, which
  // Landlock never checks.
  const bool opath = what.ends_with("-opath");
  const bool rdonly = what.ends_with("-rdonly");
  if (!opath && !rdonly) {
    std::printf("unknown case %s\n", what.c_str());
    return 2;
  }
  int fd = open_or_report(path, opath ? O_PATH : O_RDONLY);
  if (fd < 0) return 0;
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  if (what == "fchmod-rdonly") return report(::fchmod(fd, mode), "fchmod");
  if (what == "fchown-rdonly") return report(::fchown(fd, static_cast<uid_t>(-1), gid), "fchown");
  if (what == "futimens-rdonly") return report(::futimens(fd, kEpoch), "futimens");
  if (what == "fchmodat2-empty-opath")
    return report(::syscall(SYS_fchmodat2, fd, "", mode, AT_EMPTY_PATH), "fchmodat2");
  if (what == "fchownat-empty-opath") {
    return report(::fchownat(fd, "", static_cast<uid_t>(-1), gid, AT_EMPTY_PATH), "fchownat");
  }
  if (what == "procfd-chmod-opath") return report(::chmod(proc.c_str(), mode), "chmod");
  if (what == "procfd-utimensat-opath")
    return report(::utimensat(AT_FDCWD, proc.c_str(), kEpoch, 0), "utimensat");
  std::printf("unknown case %s\n", what.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: meta <case> <path> [octal mode]\n");
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const mode_t mode = argc > 3 ? static_cast<mode_t>(std::strtoul(argv[3], nullptr, 8)) : 0666;
  return run(argv[1], argv[2], mode);
}
