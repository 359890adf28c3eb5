// Real overlayfs layers for the workspace suites: a child process gets its own mount namespace
// (and a user namespace when not root), mounts the overlay of a real tree and a layer dir, and
// runs a shell script in the mount, so every write lands in upper/ exactly as a sandboxed tool's
// would. Nothing is mounted in the test process itself.
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

namespace kernex::testing {

struct OverlayRun {
  bool mounted = false;  // false: the kernel refused the mount (skip_reason says why)
  int exit_code = -1;    // the script's
  std::string skip_reason;
  std::string output;  // the script's stdout and stderr
};

struct OverlayMountOptions {
  std::string extra;            // more mount options: "redirect_dir=on"
  bool user_namespace = false;  // as root too: drop to `uid` first, mount with userxattr
  uid_t uid = 65534;
  gid_t gid = 65534;
};

namespace overlay_detail {

inline void write_file(const char* path, const std::string& text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  (void)!::write(fd, text.data(), text.size());
  ::close(fd);
}

// In the child: the namespaces and the mount; a message on `err` and exit 77 when refused.
[[noreturn]] inline void child(const std::string& opts, const std::string& mnt,
                               const std::string& script, const OverlayMountOptions& o, int err) {
  auto refuse = [&](const char* what) {
    const std::string msg = std::string(what) + ": " + std::strerror(errno);
    (void)!::write(err, msg.data(), msg.size());
    ::_exit(77);
  };
  const bool userns = o.user_namespace || ::geteuid() != 0;
  if (o.user_namespace && ::geteuid() == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(o.gid) != 0 || ::setuid(o.uid) != 0)
      refuse("dropping to the test user");
    // Changing uid made the process non-dumpable, which leaves /proc/self/uid_map to root.
    ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
  }
  const uid_t uid = ::geteuid();
  const gid_t gid = ::getegid();
  if (::unshare(userns ? CLONE_NEWUSER | CLONE_NEWNS : CLONE_NEWNS) != 0) refuse("unshare");
  if (userns) {
    write_file("/proc/self/setgroups", "deny");
    write_file("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1");
    write_file("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1");
  }
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) refuse("make / private");
  const std::string all =
      opts + (userns ? ",userxattr" : "") + (o.extra.empty() ? "" : "," + o.extra);
  if (::mount("overlay", mnt.c_str(), "overlay", 0, all.c_str()) != 0) refuse("mount overlay");
  if (::chdir(mnt.c_str()) != 0) refuse("chdir");
  ::dup2(err, 2);
  ::dup2(err, 1);
  ::execl("/bin/sh", "sh", "-ec", script.c_str(), static_cast<char*>(nullptr));
  ::_exit(127);
}

}  // namespace overlay_detail

// Mounts lower + layer_dir/{upper,work} at `mnt` in a child and runs `script` there.
inline OverlayRun run_in_overlay(const std::filesystem::path& lower,
                                 const std::filesystem::path& layer_dir,
                                 const std::filesystem::path& mnt, const std::string& script,
                                 const OverlayMountOptions& o = {}) {
  std::filesystem::create_directories(mnt);
  const std::string opts = "lowerdir=" + lower.string() +
                           ",upperdir=" + (layer_dir / "upper").string() +
                           ",workdir=" + (layer_dir / "work").string();
  int pipe_fds[2];
  OverlayRun run;
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    run.skip_reason = "pipe failed";
    return run;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipe_fds[0]);
    overlay_detail::child(opts, mnt.string(), script, o, pipe_fds[1]);
  }
  ::close(pipe_fds[1]);
  char buffer[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;)
    run.output.append(buffer, static_cast<std::size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code == 77) {
    run.skip_reason = "the kernel refused the overlay mount: " + run.output;
    return run;
  }
  run.mounted = true;
  run.exit_code = code;
  return run;
}

}  // namespace kernex::testing
