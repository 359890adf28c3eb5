// A `read` with offset/limit, served from the file the sandboxed opener handed over: the lines
// first..last of it, byte for byte as `sed -n 'first,lastp'` printed them (the per-read process
// this replaces): '\n' ends a line, the last line keeps its missing newline, NUL and invalid
// UTF-8 pass through untouched (the model's view is cut at a UTF-8 boundary later, as for any
// output). The file is untrusted and may change while it is read: every read is bounded by the
// cap, a deadline and the stop token, and a file that shrinks simply ends sooner.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stop_token>
#include <string>

#include "kernex/error.hpp"

namespace kernex::files {

struct LineRange {
  std::uint64_t first = 1;  // 1-based, at least 1
  std::uint64_t last = 0;   // inclusive; at least first (UINT64_MAX: to the end)

  // The range of read's arguments: offset (absent or 0: line 1) and limit (absent: to the end;
  // 0 counts as 1, as the sed range it replaces did).
  static LineRange of(std::optional<std::uint64_t> offset, std::optional<std::uint64_t> limit);
};

struct SelectedLines {
  std::string text;        // at most `cap` bytes of the range
  bool truncated = false;  // the range held more than `cap` bytes
};

// The lines of `range` in the regular file `fd`, read from its start. ErrorCode::Io: a read
// failed; ErrorCode::Limit: `deadline` passed; ErrorCode::Cancelled: `stop` fired.
Result<SelectedLines> read_lines(int fd, LineRange range, std::size_t cap,
                                 std::chrono::steady_clock::time_point deadline,
                                 const std::stop_token& stop);

}  // namespace kernex::files
