// Process-lifetime and process-count attacks for battery2_processes_test.cpp: `procs <case> [args]`
// prints one line, "OK ..." when the attempt worked, else the errno name of the failing step (like
// attack.cpp, whose case table this leaves alone).
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kCap =
    2000;  // a limit that doesn't hold shows as "OK 2000", without filling the pid space

const char* err() {
  const char* name = strerrorname_np(errno);
  return name != nullptr ? name : "?";
}
int report(long rc) {
  if (rc < 0)
    std::printf("%s\n", err());
  else
    std::printf("OK\n");
  return 0;
}

void* park(void*) {
  for (;;) pause();
}

// The grandchild of a double fork: ignores what it can, tells the test it is up through the FIFO,
// and lives on. `mode`: "plain", "blocked" (every signal blocked), "threads" (four more threads).
[[noreturn]] void daemon_body(const char* fifo, const std::string& mode, int up) {
  for (int sig : {SIGHUP, SIGTERM, SIGINT, SIGPIPE, SIGQUIT, SIGUSR1, SIGUSR2})
    signal(sig, SIG_IGN);
  if (mode == "blocked") {
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, nullptr);
  }
  if (mode == "threads") {
    for (int i = 0; i < 4; ++i) {
      pthread_t t;
      pthread_create(&t, nullptr, park, nullptr);
    }
  }
  prctl(PR_SET_PDEATHSIG, 0);
  const int fd = open(fifo, O_WRONLY | O_CLOEXEC);
  if (fd >= 0)
    (void)!write(fd, "ready\n", 6);  // kept open: the test sees EOF only when we are gone
  (void)!write(up, "u", 1);
  close(up);
  for (;;) pause();
}

// fork + fork + parent exit (setsid is refused, so it stays in the group but leaves its parent).
// `stay`: the command then waits forever (so the kernel sits in spawn) instead of exiting.
int orphan(const char* fifo, const std::string& mode, bool stay) {
  int up[2];
  if (pipe2(up, O_CLOEXEC) != 0) return report(-1);
  pid_t middle = fork();
  if (middle < 0) return report(-1);
  if (middle == 0) {
    if (fork() == 0) daemon_body(fifo, mode, up[1]);
    _exit(0);
  }
  close(up[1]);
  waitpid(middle, nullptr, 0);
  char c;
  (void)!read(up[0], &c, 1);  // the daemon is up (and has told the test)
  std::printf("OK orphaned\n");
  std::fflush(stdout);
  if (stay) {
    for (;;) pause();
  }
  return 0;
}

// Forks children that wait, until fork fails or kCap is reached; prints "ERRNO after N" or "OK N".
// With `hold`, waits for a line on stdin before exiting (the children live until then).
int count_forks(bool hold) {
  int made = 0;
  for (; made < kCap; ++made) {
    pid_t pid = fork();
    if (pid == 0) {
      for (;;) pause();
    }
    if (pid < 0) break;
  }
  if (made < kCap)
    std::printf("%s after %d\n", err(), made);
  else
    std::printf("OK %d\n", made);
  std::fflush(stdout);
  if (hold) {
    char c;
    (void)!read(0, &c, 1);
  }
  kill(0, SIGKILL);
  return 0;
}

int count_threads() {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  int made = 0;
  for (; made < kCap; ++made) {
    pthread_t t;
    int rc = pthread_create(&t, &attr, park, nullptr);
    if (rc != 0) {
      errno = rc;
      break;
    }
  }
  if (made < kCap)
    std::printf("%s after %d\n", err(), made);
  else
    std::printf("OK %d\n", made);
  std::fflush(stdout);
  _exit(0);
}

// Processes this one can name with kill(pid, 0) among 2..limit, other than itself and its children.
int pid_sweep(int limit) {
  int visible = 0;
  int first = 0;
  for (int pid = 1; pid <= limit; ++pid) {
    if (pid == getpid()) continue;
    if (kill(pid, 0) == 0 || errno == EPERM) {
      if (first == 0) first = pid;
      ++visible;
    }
  }
  std::printf("visible %d first %d\n", visible, first);
  return 0;
}

long clone_flags(unsigned long flags) {
  long pid = syscall(SYS_clone, flags | SIGCHLD, nullptr, nullptr, nullptr, 0);
  if (pid == 0) _exit(0);
  if (pid > 0) waitpid(static_cast<pid_t>(pid), nullptr, 0);
  return pid;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: procs <case> [args...]\n");
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string c = argv[1];
  const char* a2 = argc > 2 ? argv[2] : "";
  const std::string a3 = argc > 3 ? argv[3] : "plain";
  if (c == "orphan_stay") return orphan(a2, a3, true);
  if (c == "orphan_exit") return orphan(a2, a3, false);
  if (c == "count_forks") return count_forks(false);
  if (c == "count_forks_held") return count_forks(true);
  if (c == "count_forks_raised") {
    rlimit unlimited{RLIM_INFINITY, RLIM_INFINITY};
    const bool raised = setrlimit(RLIMIT_NPROC, &unlimited) == 0;
    std::printf("%s ", raised ? "raised" : err());
    return count_forks(false);
  }
  if (c == "count_threads") return count_threads();
  if (c == "getpid") {
    std::printf("pid %d ppid %d\n", static_cast<int>(getpid()), static_cast<int>(getppid()));
    return 0;
  }
  if (c == "pid_sweep") return pid_sweep(std::atoi(a2));
  if (c == "clone_newpid") return report(clone_flags(CLONE_NEWPID));
  if (c == "clone_newpid_newuser") return report(clone_flags(CLONE_NEWPID | CLONE_NEWUSER));
  if (c == "unshare_pid") return report(unshare(CLONE_NEWPID));
  if (c == "cgroup_escape") {
    // Back into the root pids cgroup, out of the sandbox's limit.
    int fd = open("/sys/fs/cgroup/pids/cgroup.procs", O_WRONLY | O_CLOEXEC);
    if (fd < 0) fd = open("/sys/fs/cgroup/cgroup.procs", O_WRONLY | O_CLOEXEC);
    if (fd < 0) return report(-1);
    return report(write(fd, "0", 1));
  }
  if (c == "exit") return std::atoi(a2);
  if (c == "segv") {
    volatile int* null = nullptr;
    return *null;
  }
  if (c == "self_kill") return report(kill(getpid(), SIGKILL));
  std::printf("unknown case %s\n", c.c_str());
  return 2;
}
