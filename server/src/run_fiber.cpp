// glibc's ucontext for the switches (no new dependency); each switch tells ASan which stack it is
// on (__sanitizer_start/finish_switch_fiber), so instrumented builds keep working on fibers.
#include "run_fiber.hpp"

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
// costs no mmap, munmap or fresh page faults. At most kKept; a size change (another config)
// simply misses.
constexpr std::size_t kKept = 64;

struct StackCache {
  std::mutex mutex;
  std::vector<std::pair<void*, std::size_t>> free;  // mapping, mapping size
};

StackCache& stacks() {
  static auto* cache = new StackCache;  // never destroyed: fibers may end during exit
  return *cache;
}

void* take_stack(std::size_t mapping_size) {
  StackCache& c = stacks();
  std::lock_guard lock(c.mutex);
  for (auto it = c.free.begin(); it != c.free.end(); ++it) {
    if (it->second != mapping_size) continue;
    void* m = it->first;
    c.free.erase(it);
    return m;
  }
  return nullptr;
}

void give_back_stack(void* mapping, std::size_t mapping_size) {
  {
    StackCache& c = stacks();
    std::lock_guard lock(c.mutex);
    if (c.free.size() < kKept) {
      c.free.emplace_back(mapping, mapping_size);
      return;
    }
  }
  ::munmap(mapping, mapping_size);
}

// A new stack's top pages, which every run uses (a burst's run touched 24 KiB), made present in
// one call: faulting them in one by one cost ~11 µs a page on this project's VMs, against ~0.5 µs
// a page here and ~5 µs at the first touch after (MADV_POPULATE_WRITE, Linux 5.14; older kernels
// refuse it and the pages fault in as before).
void populate_top(char* top, std::size_t stack_size, std::size_t page) {
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;
#endif
  const std::size_t bytes = std::min(stack_size, ((32u << 10) + page - 1) / page * page);
  ::madvise(top - bytes, bytes, MADV_POPULATE_WRITE);
}

}  // namespace

struct RunFiberState final : Suspender {
  ~RunFiberState() override {
    if (mapping == nullptr) return;
    unpoison(stack, stack_size);  // the next user of this memory must not inherit ASan's marks
    give_back_stack(mapping, mapping_size);
  }

  // A stack below which one page stays inaccessible: an overflow faults instead of corrupting.
  bool map_stack(std::size_t bytes) {
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    stack_size = (std::max<std::size_t>(bytes, 64u << 10) * kStackScale + page - 1) / page * page;
    mapping_size = stack_size + page;
    void* m = take_stack(mapping_size);
    if (m == nullptr) {
      m = ::mmap(nullptr, mapping_size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
      if (m == MAP_FAILED) return false;
      ::mprotect(m, page, PROT_NONE);
      populate_top(static_cast<char*>(m) + mapping_size, stack_size, page);
    }
    mapping = m;
    stack = static_cast<char*>(mapping) + page;
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

}  // namespace kernex::server
