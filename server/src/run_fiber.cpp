// glibc's ucontext for the switches (no new dependency); each switch tells ASan which stack it is
// on (__sanitizer_start/finish_switch_fiber), so instrumented builds keep working on fibers.
#include "run_fiber.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kernex/log.hpp"
#include "kernex/suspend.hpp"
#include "log_context.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace kernex::server {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr std::size_t kStackScale = 4;  // ASan's redzones make every frame several times larger
void start_switch(void** fake_stack, const void* bottom, std::size_t size) {
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
}
void finish_switch(void* fake_stack, const void** bottom, std::size_t* size) {
  __sanitizer_finish_switch_fiber(fake_stack, bottom, size);
}
void unpoison(void* at, std::size_t size) { __asan_unpoison_memory_region(at, size); }
#else
constexpr std::size_t kStackScale = 1;
void start_switch(void**, const void*, std::size_t) {}
void finish_switch(void*, const void**, std::size_t*) {}
void unpoison(void*, std::size_t) {}
#endif

// Stacks of ended fibers, kept for the next runs (as a pool thread keeps its stack): a run then
// costs no mmap, munmap or fresh page faults. At most kKept, or as many as RunFiber::reserve made;
// a size change (another config) simply misses.
constexpr std::size_t kKept = 64;

struct StackCache {
  std::mutex mutex;
  std::vector<std::pair<void*, std::size_t>> free;  // mapping, mapping size
  std::size_t keep = kKept;
};

StackCache& stacks() {
  static auto* cache = new StackCache;  // never destroyed: fibers may end during exit
  return *cache;
}

void* take_stack(std::size_t mapping_size) {
  StackCache& c = stacks();
  std::lock_guard lock(c.mutex);
  for (auto it = c.free.rbegin(); it != c.free.rend(); ++it) {
    if (it->second != mapping_size) continue;
    void* m = it->first;
    c.free.erase(std::next(it).base());
    return m;
  }
  return nullptr;
}

void give_back_stack(void* mapping, std::size_t mapping_size) {
  {
    StackCache& c = stacks();
    std::lock_guard lock(c.mutex);
    if (c.free.size() < c.keep) {
      c.free.emplace_back(mapping, mapping_size);
      return;
    }
  }
  ::munmap(mapping, mapping_size);
}

// The top of a stack, which every run uses (a burst's run touched 24 KiB).
constexpr std::size_t kTopBytes = 32u << 10;

std::size_t page_size() { return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)); }

// kTopBytes in whole pages (64 KiB pages included), at most the stack.
std::size_t top_bytes(std::size_t stack) {
  const std::size_t page = page_size();
  return std::min(stack, (kTopBytes + page - 1) / page * page);
}

// A stack's sizes for `bytes` asked: the stack, and its mapping with one guard page below it.
struct StackSize {
  std::size_t stack, mapping;
};
StackSize stack_size_for(std::size_t bytes) {
  const std::size_t page = page_size();
  const std::size_t stack =
      (std::max<std::size_t>(bytes, 64u << 10) * kStackScale + page - 1) / page * page;
  return {stack, stack + page};
}

// A new stack below which one page stays inaccessible (an overflow faults instead of corrupting),
// its top pages made present in one call: faulting them in one by one cost ~11-14 µs a page on this
// project's VMs, against ~0.5-2 µs a page here and ~6 µs at the first touch after
// (MADV_POPULATE_WRITE, Linux 5.14; older kernels refuse it and the pages fault in as before).
// Null when no memory could be mapped.
void* map_new_stack(StackSize size) {
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;
#endif
  void* m = ::mmap(nullptr, size.mapping, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  if (::mprotect(m, page_size(), PROT_NONE) != 0) {  // no stack without its guard (map limit)
    ::munmap(m, size.mapping);
    return nullptr;
  }
  const std::size_t top = top_bytes(size.stack);
  ::madvise(static_cast<char*>(m) + size.mapping - top, top, MADV_POPULATE_WRITE);
  return m;
}

// Makes a stack's top pages as cheap as a reused stack's: on this project's VMs (shadow paging) a
// page costs ~14 µs at its first write from user code and ~6.5 µs more at the kernel's first
// access to it (a system call's argument on the stack: SQLite's struct flock, a pollfd, a
// sockaddr), ~1.4 µs a system call after that (measured with fcntl(F_SETLK)). A byte written to
// each page, then one read(2) of /dev/zero over them all, pays both before any run.
void warm_top(void* mapping, StackSize size, int dev_zero) {
  const std::size_t page = page_size();
  const std::size_t top = top_bytes(size.stack);
  auto* end = static_cast<volatile char*>(mapping) + size.mapping;
  for (std::size_t off = page; off <= top; off += page) end[-static_cast<std::ptrdiff_t>(off)] = 0;
  if (dev_zero >= 0) [[maybe_unused]]
    auto n = ::read(dev_zero, static_cast<char*>(mapping) + size.mapping - top, top);
}

}  // namespace

struct RunFiberState final : Suspender {
  ~RunFiberState() override {
    if (mapping == nullptr) return;
    unpoison(stack, stack_size);  // the next user of this memory must not inherit ASan's marks
    give_back_stack(mapping, mapping_size);
  }

  // A cached stack if one of this size is kept, else a new one.
  bool map_stack(std::size_t bytes) {
    const StackSize size = stack_size_for(bytes);
    stack_size = size.stack;
    mapping_size = size.mapping;
    void* m = take_stack(mapping_size);
    if (m == nullptr) m = map_new_stack(size);
    if (m == nullptr) return false;
    mapping = m;
    stack = static_cast<char*>(mapping) + page_size();
    return true;
  }

  static void entry(unsigned hi, unsigned lo) {
    auto* self = reinterpret_cast<RunFiberState*>((static_cast<std::uintptr_t>(hi) << 32) | lo);
    finish_switch(nullptr, &self->from_bottom, &self->from_size);
    try {
      self->body();
    } catch (const std::exception& e) {
      kernex::log(LogLevel::Error, std::string("serve: a run's task threw: ") + e.what());
    }
    self->body = nullptr;  // what the run held goes before the fiber counts as ended
    self->finished = true;
    start_switch(nullptr, self->from_bottom, self->from_size);  // null: this stack is done
    ::setcontext(&self->thread);
  }

  // On the fiber: back to the thread that runs this slice, until `arm`'s resume.
  void suspend(const std::function<void(Resume)>& arm_with) override {
    arm = &arm_with;
    start_switch(&fake_stack, from_bottom, from_size);
    ::swapcontext(&fiber, &thread);
    finish_switch(fake_stack, &from_bottom, &from_size);
  }

  // On a pool thread: runs the fiber until it ends or suspends. Everything of this state is read
  // before the suspension's arm runs: once armed, the fiber may run on another thread.
  static void slice(const std::shared_ptr<RunFiberState>& self) {
    Suspender* outer = set_current_suspender(self.get());
    std::string thread_log = exchange_log_context(std::move(self->log));
    void* thread_fake = nullptr;
    start_switch(&thread_fake, self->stack, self->stack_size);
    ::swapcontext(&self->thread, &self->fiber);
    finish_switch(thread_fake, nullptr, nullptr);
    self->log = exchange_log_context(std::move(thread_log));
    set_current_suspender(outer);
    if (self->finished) return;
    const std::function<void(Resume)> arm_copy = *self->arm;  // its captures outlive the slice
    self->arm = nullptr;
    arm_copy([self] { self->submit([self] { slice(self); }, true); });
  }

  std::function<void()> body;
  RunFiber::Submit submit;
  void* mapping = nullptr;
  std::size_t mapping_size = 0;
  char* stack = nullptr;
  std::size_t stack_size = 0;
  // Value-initialised: the thread context's uc_stack stays empty, so ASan's swapcontext
  // interceptor clears no shadow for it.
  ucontext_t fiber{};
  ucontext_t thread{};
  const std::function<void(Resume)>* arm = nullptr;  // set by suspend, taken by the slice
  bool finished = false;
  std::string log;                    // the fiber's log context while it is off a thread
  void* fake_stack = nullptr;         // ASan: the fiber's fake stack while it is off a thread
  const void* from_bottom = nullptr;  // ASan: the stack of the thread the fiber runs on
  std::size_t from_size = 0;
};

bool RunFiber::start(std::function<void()> body, std::size_t stack_bytes, const Submit& submit) {
  auto state = std::make_shared<RunFiberState>();
  if (!state->map_stack(stack_bytes) || ::getcontext(&state->fiber) != 0) return false;
  state->fiber.uc_stack.ss_sp = state->stack;
  state->fiber.uc_stack.ss_size = state->stack_size;
  state->fiber.uc_link = nullptr;
  const auto address = reinterpret_cast<std::uintptr_t>(state.get());
  ::makecontext(&state->fiber, reinterpret_cast<void (*)()>(&RunFiberState::entry), 2,
                static_cast<unsigned>(address >> 32), static_cast<unsigned>(address));
  // Read by makecontext only: left set, ASan's swapcontext interceptor would clear the whole
  // stack's shadow at every switch into the fiber (it is fresh memory: nothing to clear).
  state->fiber.uc_stack = stack_t{};
  state->body = std::move(body);
  state->submit = submit;
  submit([state] { RunFiberState::slice(state); }, false);
  return true;
}

namespace {

// How many stacks of `mapping_size` the cache holds; c.mutex held.
std::size_t kept_locked(const StackCache& c, std::size_t mapping_size) {
  return static_cast<std::size_t>(std::count_if(
      c.free.begin(), c.free.end(), [&](const auto& s) { return s.second == mapping_size; }));
}

}  // namespace

std::size_t RunFiber::default_reserve() { return kStackScale == 1 ? 1024 : 0; }

std::size_t RunFiber::kept(std::size_t stack_bytes) {
  StackCache& c = stacks();
  std::lock_guard lock(c.mutex);
  return kept_locked(c, stack_size_for(stack_bytes).mapping);
}

std::size_t RunFiber::reserve(std::size_t count, std::size_t stack_bytes) {
  const StackSize size = stack_size_for(stack_bytes);
  std::vector<std::pair<void*, std::size_t>> made;
  const struct Zero {  // server/ links no sandbox library, whose UniqueFd this would be
    // -1: the kernel's side stays cold. Non-blocking: a broken chroot's FIFO never hangs a start.
    int fd = ::open("/dev/zero", O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    ~Zero() {
      if (fd >= 0) ::close(fd);
    }
  } zero;
  for (std::size_t i = kept(stack_bytes); i < count; ++i) {
    void* m = map_new_stack(size);
    if (m == nullptr) break;
    warm_top(m, size, zero.fd);
    made.emplace_back(m, size.mapping);
  }
  StackCache& c = stacks();
  std::lock_guard lock(c.mutex);
  c.free.insert(c.free.end(), made.begin(), made.end());
  c.keep = std::max(c.keep, c.free.size());
  return kept_locked(c, size.mapping);
}

}  // namespace kernex::server
