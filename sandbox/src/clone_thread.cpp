#include "clone_thread.hpp"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>

namespace kernex::sandbox::detail {
namespace {

class CloneThread {
 public:
  CloneThread() : owner_(::getpid()) {
    stack_ = ::mmap(nullptr, kStackSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack_ == MAP_FAILED) return;
    try {
      std::thread([this] { run(); }).detach();
    } catch (const std::system_error& e) {
      ::munmap(stack_, kStackSize);
      stack_ = MAP_FAILED;
      start_error_ = e.code().value();
    }
  }

  pid_t owner() const { return owner_; }
  bool started() const { return stack_ != MAP_FAILED; }
  int start_error() const { return start_error_; }

  CloneOutcome clone_child(ChildSpec& spec) {
    std::lock_guard turn(turn_);
    std::unique_lock lock(mutex_);
    request_ = &spec;
    wake_.notify_one();
    done_.wait(lock, [this] { return request_ == nullptr; });
    return outcome_;
  }

 private:
  static constexpr std::size_t kStackSize = 64 * 1024;

  void run() {
    // No handler of the process may run on the child's side of the shared memory before execve; the
    // child restores default dispositions and unblocks.
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, nullptr);
    pthread_setname_np(pthread_self(), "kernex-clone");  // what ps shows for a child until its execve
    // Best effort: without CAP_SETPCAP nothing is dropped here and the child checks and drops itself.
    for (long cap = 0; ::prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; ++cap) ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
    // Checked after the fact; a set once empty stays so, as no other thread can change this one's.
    bool empty = true;
    for (long cap = 0;; ++cap) {
      long has = ::prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
      if (has < 0) break;
      if (has != 0) empty = false;
    }
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return request_ != nullptr; });
      request_->bounding_set_empty = empty;
      CloneOutcome out;
      out.pid = ::clone(child_main, static_cast<char*>(stack_) + kStackSize,
                        CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, request_, &out.pidfd);
      if (out.pid < 0) out.error = errno;
      outcome_ = out;
      request_ = nullptr;
      done_.notify_one();
    }
  }

  const pid_t owner_;
  void* stack_ = MAP_FAILED;
  int start_error_ = ENOMEM;
  std::mutex turn_;  // one request in flight
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  ChildSpec* request_ = nullptr;
  CloneOutcome outcome_;
};

}  // namespace

CloneOutcome clone_child(ChildSpec& spec) {
  // Never destroyed: the detached thread uses it until the process exits. A forked copy of the process
  // has no such thread, so it starts its own.
  static std::mutex create;
  static CloneThread* thread = nullptr;
  CloneThread* current;
  {
    std::lock_guard lock(create);
    if (thread == nullptr || thread->owner() != ::getpid()) thread = new CloneThread();
    if (!thread->started()) {
      const CloneOutcome failed{-1, -1, thread->start_error()};
      delete thread;  // no thread uses it; the next spawn tries again
      thread = nullptr;
      return failed;
    }
    current = thread;
  }
  return current->clone_child(spec);
}

}  // namespace kernex::sandbox::detail
