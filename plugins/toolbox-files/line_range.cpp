#include "line_range.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <string_view>

#include "sandboxed_opener.hpp"

namespace kernex::files {

namespace {

constexpr std::uint64_t kToTheEnd = std::numeric_limits<std::uint64_t>::max();
constexpr std::size_t kReadSlice = 256 * 1024;

// Just past the `n`th '\n' of `s` (n >= 1), or nullptr when `s` holds fewer.
const char* past_newline(std::string_view s, std::uint64_t n) {
  const char* at = s.data();
  const char* end = s.data() + s.size();
  for (; n > 0; --n) {
    const void* nl = std::memchr(at, '\n', static_cast<std::size_t>(end - at));
    if (nl == nullptr) return nullptr;
    at = static_cast<const char*>(nl) + 1;
  }
  return at;
}

// Where one slice of the file lies against the range: `line` is the number of the line its first
// byte belongs to, and moves on with the slice. Returns the slice's part inside the range, and
// sets `done` once the range's last line has ended in it.
std::string_view in_range(std::string_view slice, std::uint64_t& line, const LineRange& range,
                          bool& done) {
  if (line < range.first) {
    // Most slices lie wholly before the range: counted 16 bytes a step, not a line at a time.
    const std::uint64_t newlines = count_newlines(slice);
    if (newlines < range.first - line) {
      line += newlines;
      return {};
    }
    const char* start = past_newline(slice, range.first - line);
    slice.remove_prefix(static_cast<std::size_t>(start - slice.data()));
    line = range.first;
  }
  if (range.last == kToTheEnd) return slice;
  const std::uint64_t wanted = range.last - line + 1;  // newlines until the range ends
  const std::uint64_t newlines = count_newlines(slice);
  if (newlines < wanted) {
    line += newlines;
    return slice;
  }
  const char* end = past_newline(slice, wanted);
  line = range.last + 1;
  done = true;
  return slice.substr(0, static_cast<std::size_t>(end - slice.data()));
}

}  // namespace

LineRange LineRange::of(std::optional<std::uint64_t> offset, std::optional<std::uint64_t> limit) {
  LineRange range;
  range.first = std::max<std::uint64_t>(offset.value_or(1), 1);
  if (!limit) {
    range.last = kToTheEnd;
  } else {
    const std::uint64_t count = std::max<std::uint64_t>(*limit, 1);
    range.last = count - 1 > kToTheEnd - range.first ? kToTheEnd : range.first + count - 1;
  }
  return range;
}

Result<SelectedLines> read_lines(int fd, LineRange range, std::size_t cap,
                                 std::chrono::steady_clock::time_point deadline,
                                 const std::stop_token& stop) {
  if (range.first == 0) range.first = 1;
  if (range.last < range.first) return SelectedLines{};
  const std::unique_ptr<char[]> buffer(new char[kReadSlice]);
  SelectedLines out;
  std::uint64_t line = 1;
  off_t at = 0;
  for (bool done = false; !done;) {
    if (stop.stop_requested()) return fail(ErrorCode::Cancelled, "the read was cancelled");
    if (std::chrono::steady_clock::now() >= deadline) return fail(ErrorCode::Limit, "timed out");
    const ssize_t n = ::pread(fd, buffer.get(), kReadSlice, at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(ErrorCode::Io, std::strerror(errno));
    if (n == 0) break;  // the end, wherever the file ends now
    at += n;
    const std::string_view part =
        in_range({buffer.get(), static_cast<std::size_t>(n)}, line, range, done);
    const std::size_t room = cap - out.text.size();
    if (part.size() > room) {
      out.text.append(part.substr(0, room));
      out.truncated = true;
      return out;
    }
    out.text.append(part);
  }
  return out;
}

}  // namespace kernex::files
