// A run on its own small stack (a fiber), so that it can wait without a thread. Its slices run on
// the run pool's threads: one runs the fiber until it ends or suspends (waiting on its model,
// Provider::start, or on a socket, kernex::wait_fd); the wait's end submits the next slice, which
// may run on another thread. While a slice runs, the fiber is the thread's kernex::Suspender.
// The fiber's log context (log_context.hpp) goes with it from thread to thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

namespace kernex::server {

struct RunFiberState;  // run_fiber.cpp

class RunFiber {
 public:
  // Where slices run: the run pool's submit. `resume`: a slice after a wait, not the first.
  using Submit = std::function<void(std::function<void()>, bool resume)>;
  // Runs `body` on a new fiber with a `stack_bytes` stack (at least 64 KiB; ASan builds take four
  // times as much), its first slice submitted now. False: no stack could be had (the caller runs
  // the body as a plain task instead).
  static bool start(std::function<void()> body, std::size_t stack_bytes, const Submit& submit);
  // Makes `count` stacks for `stack_bytes` before any run asks (serve.run_stack_reserve): mapped,
  // guarded and their top pages written (by user code and by the kernel), so a cold server's burst
  // pays no mmap, mprotect or first-access fault for its first `count` runs (~250 µs a run on
  // this project's VMs). The stacks
  // of ended fibers are then kept up to that many too. Returns how many are kept now (fewer when
  // memory ran out); stacks of that size already kept count toward `count`.
  static std::size_t reserve(std::size_t count, std::size_t stack_bytes);
  // serve.run_stack_reserve unset: 1024, or 0 in an ASan build (its stacks are 4x, and a reserve
  // there cost ~0.3 s of each server start while it measures nothing).
  static std::size_t default_reserve();
  // The stacks for `stack_bytes` kept now, ready for the next runs.
  static std::size_t kept(std::size_t stack_bytes);
};

}  // namespace kernex::server
