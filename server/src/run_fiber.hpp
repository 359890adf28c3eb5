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
};

}  // namespace kernex::server
