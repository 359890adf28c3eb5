// An optional interface a MemoryStore may also implement: the kernel brackets the reads of one
// context build with it (open_conversation, the history window and its count, then the memory
// sections), so the store may serve them from one snapshot. The SQLite store reads them in one
// read transaction instead of one per statement (two lock calls on the WAL index each).
//
// The kernel finds it with dynamic_cast on the store, so it is not part of MemoryStore's vtable:
// a plugin built before it (ABI 10) loads and runs unchanged, its reads one by one as before.
//
// The contract: begin and end on one thread, end always follows begin (also on an error), and
// the kernel makes no write of its own in between. A store must still answer a write, or settle
// a queued one, asked for in between (a read that must see it), and must never make another
// thread's call wait on the bracket beyond its end.
#pragma once

namespace kernex {

class ContextReadScope {
 public:
  virtual void begin_context_reads() = 0;
  virtual void end_context_reads() = 0;

 protected:
  ContextReadScope() = default;
  ContextReadScope(const ContextReadScope&) = default;
  ContextReadScope& operator=(const ContextReadScope&) = default;
  ~ContextReadScope() = default;  // never deleted through this interface
};

}  // namespace kernex
