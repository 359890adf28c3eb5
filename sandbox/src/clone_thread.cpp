#include "clone_thread.hpp"

#include <linux/futex.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace kernex::sandbox::detail {
namespace {

// At most this many seccomp programs get a thread of their own (in practice one per network policy:
// none, AF_UNIX, TCP); children of any other program load it themselves.
constexpr std::size_t kMaxFilteredThreads = 4;
// And this many (program, mount namespace) pairs: a thread that joined a policy's mount namespace
// keeps it (and its bind mounts) for the life of the process, as it never exits, so policies beyond
// these fall back to children that join the namespace and load the program themselves (~50 µs
// more).
constexpr std::size_t kMaxNamespaceThreads = 8;

// A mount namespace by identity: a thread inside one keeps it alive, so its inode can't be reused
// while such a thread exists, whatever fd numbers policies come and go with.
struct NamespaceId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const NamespaceId&) const = default;
};

class CloneThread {
 public:
  // `filter` empty: a plain thread whose children load their own filter. Otherwise the thread loads
  // it once and every child inherits it (loading one costs ~50 µs per spawn, most of it the kernel
  // compiling and caching the program); the thread never does anything the filter refuses.
  // `mntns_fd` >= 0 (with a filter): the thread also joins that mount namespace, which needs
  // CAP_SYS_ADMIN and a filesystem context of its own (unshare(CLONE_FS)), before loading the
  // filter, which refuses setns; its children are then born in the namespace and under the filter.
  // `kernel_pidfd` >= 0: the thread's children live in a PID namespace of its own
  // (start_pid_namespace).
  explicit CloneThread(int kernel_pidfd, std::vector<sock_filter> filter, int mntns_fd = -1,
                       NamespaceId ns = {})
      : owner_(::getpid()),
        filter_(std::move(filter)),
        mntns_(ns),
        kernel_pidfd_(kernel_pidfd),
        join_fd_(mntns_fd) {
    stack_ = ::mmap(nullptr, kStackSize, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack_ == MAP_FAILED) return;
    try {
      std::thread([this] { run(); }).detach();
    } catch (const std::system_error& e) {
      start_failed(e.code().value());
      return;
    }
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return ready_ || stack_ == MAP_FAILED; });
  }

  pid_t owner() const { return owner_; }
  bool started() const { return stack_ != MAP_FAILED; }
  int start_error() const { return start_error_; }
  const std::vector<sock_filter>& filter() const { return filter_; }
  const NamespaceId& mount_namespace() const { return mntns_; }
  bool in_mount_namespace() const { return mntns_.ino != 0; }
  bool has_pid_namespace() const { return reaper_pidfd_ >= 0; }
  // A thread whose init died (killed by hand) can't clone any more: its namespace refuses new
  // members.
  bool usable() const {
    if (reaper_pidfd_ < 0) return true;
    pollfd p{reaper_pidfd_, POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;
  }

  // Wakes the thread ahead of a request (see warm_clone_thread); it then spins for the request a
  // while.
  void warm() {
    if (!may_spin_) return;
    {
      std::lock_guard lock(mutex_);
      warm_ = true;
    }
    wake_.notify_one();
  }

  CloneOutcome clone_child(ChildSpec& spec) {
    std::lock_guard turn(turn_);  // one child on the stack at a time
    const bool inherit = !filter_.empty();
    if (in_mount_namespace()) spec.mntns_fd = -1;  // born there: the child has nothing to join
    if (spec.new_pid_ns && !has_pid_namespace()) return {-1, -1, ENOTSUP};  // fail closed
    if (inherit) {
      spec.filter_inherited = true;
      spec.group_state = 0;
      spec.child_tid = 1;
    }
    {
      std::lock_guard lock(mutex_);
      answered_.store(false, std::memory_order_relaxed);
      request_.store(&spec, std::memory_order_release);
    }
    wake_.notify_one();
    // Without a filter the answer comes only after the child's execve: too long to spin for.
    if (!inherit || !spin_until_answered()) {
      std::unique_lock lock(mutex_);
      done_.wait(lock, [this] { return answered_.load(std::memory_order_acquire); });
    }
    const CloneOutcome out = outcome_;
    if (!inherit || out.pid < 0) return out;
    // The thread's filter refuses setpgid, this one's doesn't; the child waits for it before its
    // execve.
    spec.group_state = ::setpgid(out.pid, out.pid) == 0 ? 1 : -errno;
    ::syscall(SYS_futex, &spec.group_state, FUTEX_WAKE, 1, nullptr, nullptr, 0);
    // Like CLONE_VFORK: back only once the child's execve has replaced its memory, or it has
    // exited.
    for (pid_t tid; (tid = spec.child_tid) != 0;) {
      ::syscall(SYS_futex, &spec.child_tid, FUTEX_WAIT, tid, nullptr, nullptr, 0);
    }
    return out;
  }

 private:
  static constexpr std::size_t kStackSize = 64 * 1024;
  static constexpr std::chrono::microseconds kSpin{100};
  // A warmed thread waits this long for the request: spawn's own preparation (command lookup,
  // pipes) takes ~30 µs, about what waking this thread costs, so the two overlap.
  static constexpr std::chrono::microseconds kWarmSpin{200};

  // The answer takes a wake-up of this thread and a clone (~50 µs); sleeping for it would add a
  // wake-up of the requester too, ~25 µs when its CPU has gone idle (a VM exit here). Spinning is
  // bounded and only done when this thread can run on another CPU meanwhile.
  bool spin_until_answered() const {
    if (!may_spin_) return false;
    const auto give_up = std::chrono::steady_clock::now() + kSpin;
    while (!answered_.load(std::memory_order_acquire)) {
      if (std::chrono::steady_clock::now() > give_up) return false;
      pause();
    }
    return true;
  }

  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  void start_failed(int error) {
    std::lock_guard lock(mutex_);
    ::munmap(stack_, kStackSize);
    stack_ = MAP_FAILED;
    start_error_ = error;
    done_.notify_all();
  }

  // This thread's children are born in a PID namespace whose init (reaper_main, the first child)
  // lives as long as the kernel: when the kernel dies, even by SIGKILL, the init's PDEATHSIG fires
  // and Linux kills every process of the namespace, however it was forked. Commands are ordinary
  // members (not the init, which would ignore signals it sends itself), and the unshare comes
  // before the filter, which refuses it (and CLONE_NEWPID).
  bool start_pid_namespace() {
    if (::unshare(CLONE_NEWPID) != 0) return false;
    reaper_stack_ = ::mmap(nullptr, kReaperStack, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (reaper_stack_ == MAP_FAILED) return false;
    const pid_t reaper = ::clone(reaper_main, static_cast<char*>(reaper_stack_) + kReaperStack,
                                 CLONE_VM | CLONE_PIDFD | SIGCHLD, &kernel_pidfd_, &reaper_pidfd_);
    return reaper > 0;
  }

  // Best effort: without CAP_SETPCAP nothing is dropped here and the child checks and drops itself.
  // Checked after the fact; a set once empty stays so, as no other thread can change this one's.
  static bool empty_bounding_set() {
    for (long cap = 0; ::prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; ++cap)
      ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
    for (long cap = 0;; ++cap) {
      long has = ::prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
      if (has < 0) return true;
      if (has != 0) return false;
    }
  }

  void run() {
    // No handler of the process may run on the child's side of the shared memory before execve; the
    // child restores default dispositions and unblocks.
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, nullptr);
    pthread_setname_np(pthread_self(),
                       "kernex-clone");  // what ps shows for a child until its execve
    const bool empty = empty_bounding_set();
    cpu_set_t cpus;
    may_spin_ = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 && CPU_COUNT(&cpus) > 1;
    if (join_fd_ >= 0 && (::unshare(CLONE_FS) != 0 || ::setns(join_fd_, CLONE_NEWNS) != 0)) {
      start_failed(errno);
      return;
    }
    if (kernel_pidfd_ >= 0 && !start_pid_namespace()) {
      start_failed(errno);
      return;
    }
    if (!filter_.empty()) {
      // Per thread (no TSYNC): the rest of the process is untouched. no_new_privs first, as the
      // kernel requires.
      sock_fprog prog{static_cast<unsigned short>(filter_.size()),
                      const_cast<sock_filter*>(filter_.data())};
      if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
          ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) {
        start_failed(errno);
        return;  // nothing else refers to the thread; its creator sees the failure
      }
    }
    {
      std::lock_guard lock(mutex_);
      ready_ = true;
    }
    done_.notify_all();
    for (;;) {
      ChildSpec* request;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock,
                   [this] { return warm_ || request_.load(std::memory_order_relaxed) != nullptr; });
        warm_ = false;
        request = request_.load(std::memory_order_acquire);
      }
      if (request == nullptr && (request = spin_for_request()) == nullptr) continue;
      request->bounding_set_empty = empty;
      CloneOutcome out;
      // Without a filter: CLONE_VFORK, so clone returns once the child has exec'd. With one, the
      // child must first be put in its own group by the requester, so clone returns at once and the
      // requester waits on child_tid instead.
      const int flags = filter_.empty() ? CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD
                                        : CLONE_VM | CLONE_PIDFD | CLONE_CHILD_CLEARTID | SIGCHLD;
      out.pid = ::clone(child_main, static_cast<char*>(stack_) + kStackSize, flags, request,
                        &out.pidfd, nullptr, const_cast<pid_t*>(&request->child_tid));
      if (out.pid < 0) out.error = errno;
      outcome_ = out;
      {
        std::lock_guard lock(mutex_);
        request_.store(nullptr, std::memory_order_relaxed);
        answered_.store(true, std::memory_order_release);
      }
      done_.notify_one();
    }
  }

  ChildSpec* spin_for_request() const {
    const auto give_up = std::chrono::steady_clock::now() + kWarmSpin;
    for (;;) {
      if (ChildSpec* request = request_.load(std::memory_order_acquire)) return request;
      if (std::chrono::steady_clock::now() > give_up) return nullptr;
      pause();
    }
  }

  const pid_t owner_;
  const std::vector<sock_filter> filter_;
  const NamespaceId mntns_;
  int kernel_pidfd_ =
      -1;  // >= 0: children go in a PID namespace of this thread's (reaper_main's arg)
  int reaper_pidfd_ = -1;
  void* reaper_stack_ = MAP_FAILED;
  static constexpr std::size_t kReaperStack = 16 * 1024;
  const int join_fd_;  // read by the thread before it reports ready; not kept
  void* stack_ = MAP_FAILED;
  int start_error_ = ENOMEM;
  bool ready_ = false;
  bool may_spin_ = false;              // set before ready_, read only after
  std::atomic<bool> answered_{false};  // outcome_ is set for the current request
  std::mutex turn_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  bool warm_ = false;                         // under mutex_
  std::atomic<ChildSpec*> request_{nullptr};  // set under mutex_; read by the spinning thread
  CloneOutcome outcome_;
};

// Never destroyed: the detached threads use them until the process exits. A forked copy of the
// process has none of the threads, so it starts its own.
struct Registry {
  std::mutex mutex;
  pid_t owner = 0;
  CloneThread* plain = nullptr;
  std::vector<CloneThread*> filtered;
  std::vector<CloneThread*> in_namespace;
  int self_pidfd = -1;  // this process, for children in a PID namespace of their own (child.hpp)
};

bool same_program(const std::vector<sock_filter>& a, const sock_fprog& b) {
  return a.size() == b.len && std::memcmp(a.data(), b.filter, a.size() * sizeof(sock_filter)) == 0;
}

// The kernel's pidfd for a new thread's PID namespace init, or -1 where the kernel can't make one.
int pid_namespace_pidfd(const Registry& reg) {
  return pid_namespaces_available() ? reg.self_pidfd : -1;
}

// Drops the threads whose namespace init died (abandoned: they never exit); new ones replace them.
void drop_unusable(Registry& reg) {
  for (auto* list : {&reg.filtered, &reg.in_namespace}) {
    std::erase_if(*list, [](CloneThread* t) { return !t->usable(); });
  }
  if (reg.plain != nullptr && !reg.plain->usable()) reg.plain = nullptr;
}

// A thread in the child's mount namespace carrying its program, when the spec has both and no user
// namespace (a multithreaded process can't join one, so an unprivileged kernel's children join it
// themselves).
CloneThread* pick_in_namespace(Registry& reg, const ChildSpec& spec) {
  const sock_fprog* prog = spec.seccomp;
  if (!spec.sandboxed || spec.mntns_fd < 0 || spec.userns_fd >= 0 || prog == nullptr ||
      prog->len == 0)
    return nullptr;
  struct stat st {};
  if (::fstat(spec.mntns_fd, &st) != 0) return nullptr;
  const NamespaceId ns{st.st_dev, st.st_ino};
  for (CloneThread* t : reg.in_namespace) {
    if (t->mount_namespace() == ns && same_program(t->filter(), *prog)) return t;
  }
  if (reg.in_namespace.size() >= kMaxNamespaceThreads) return nullptr;
  auto* t = new CloneThread(pid_namespace_pidfd(reg),
                            std::vector<sock_filter>(prog->filter, prog->filter + prog->len),
                            spec.mntns_fd, ns);
  if (!t->started()) {
    delete t;  // e.g. no CAP_SYS_ADMIN: the child joins the namespace itself
    return nullptr;
  }
  reg.in_namespace.push_back(t);
  return t;
}

// Which thread clones `spec`: one carrying its seccomp program when it can (a child that joins a
// mount namespace must call setns, which the program refuses, so it loads the program after).
CloneThread* pick(Registry& reg, const ChildSpec& spec, CloneOutcome& failed) {
  std::lock_guard lock(reg.mutex);
  if (reg.owner != ::getpid()) {
    reg.owner = ::getpid();
    reg.plain = nullptr;
    reg.filtered.clear();
    reg.in_namespace.clear();
    // A forked copy inherited its parent's pidfd (if any): that one names the wrong process.
    if (reg.self_pidfd >= 0) ::close(reg.self_pidfd);
    reg.self_pidfd = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));
  }
  drop_unusable(reg);
  const sock_fprog* prog = spec.seccomp;
  if (CloneThread* t = pick_in_namespace(reg, spec)) return t;
  if (spec.sandboxed && spec.mntns_fd < 0 && prog != nullptr && prog->len > 0) {
    for (CloneThread* t : reg.filtered) {
      if (same_program(t->filter(), *prog)) return t;
    }
    if (reg.filtered.size() < kMaxFilteredThreads) {
      auto* t = new CloneThread(pid_namespace_pidfd(reg),
                                std::vector<sock_filter>(prog->filter, prog->filter + prog->len));
      if (t->started()) {
        reg.filtered.push_back(t);
        return t;
      }
      delete t;  // e.g. seccomp unavailable: the child's own load below reports it
    }
  }
  if (reg.plain == nullptr) {
    auto* t = new CloneThread(pid_namespace_pidfd(reg), {});
    if (!t->started()) {
      failed = {-1, -1, t->start_error()};
      delete t;  // no thread uses it; the next spawn tries again
      return nullptr;
    }
    reg.plain = t;
  }
  return reg.plain;
}

Registry& registry() {
  static Registry* registry = new Registry;
  return *registry;
}

}  // namespace

void warm_clone_thread(const ChildSpec& spec) {
  CloneOutcome failed;
  if (CloneThread* thread = pick(registry(), spec, failed)) thread->warm();
}

CloneOutcome clone_child(ChildSpec& spec) {
  CloneOutcome failed;
  CloneThread* thread = pick(registry(), spec, failed);
  if (thread == nullptr) return failed;
  if (spec.new_pid_ns) {
    spec.parent_pidfd = registry().self_pidfd;  // set once per process, under pick's lock
    if (spec.parent_pidfd < 0) return {-1, -1, ENOSYS};
  }
  return thread->clone_child(spec);
}

namespace {
__attribute__((no_sanitize("address", "undefined"))) int exit_at_once(void*) {
  for (;;) ::syscall(SYS_exit_group, 0);
}
}  // namespace

bool pid_namespaces_available() {
  static const bool available = [] {
    const int self = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));
    if (self < 0) return false;
    ::close(self);
    constexpr std::size_t kStack = 16 * 1024;
    void* stack = ::mmap(nullptr, kStack, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) return false;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all,
                    &old);  // no handler may run on the child's side of the memory
    const pid_t pid = ::clone(exit_at_once, static_cast<char*>(stack) + kStack,
                              CLONE_VM | CLONE_VFORK | CLONE_NEWPID | SIGCHLD, nullptr);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (pid > 0) {
      while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    ::munmap(stack, kStack);
    return pid > 0;
  }();
  return available;
}

}  // namespace kernex::sandbox::detail
