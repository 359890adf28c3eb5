// The SSE parser and the line splitter (NDJSON streams) on a stream cut into chunks where the
// input says: the first byte is the chunk size, so events split anywhere are exercised.
#include <algorithm>

#include "fuzz.hpp"
#include "kernex/http/sse.hpp"

KERNEX_FUZZ_TARGET(sse_parser) {
  if (size == 0) return 0;
  const std::size_t chunk = 1 + data[0] % 64;
  const std::string_view stream = kernex::fuzz::text(data + 1, size - 1);
  kernex::http::SseParser sse(4096, 8192);  // small caps so the limits are reached too
  kernex::http::LineSplitter lines(4096);
  bool sse_ok = true, lines_ok = true;
  std::size_t events = 0;
  for (std::size_t at = 0; at < stream.size(); at += chunk) {
    const auto piece = stream.substr(at, std::min(chunk, stream.size() - at));
    if (sse_ok)
      sse_ok = sse.feed(piece, [&](const kernex::http::SseEvent&) { ++events; }).has_value();
    if (lines_ok) lines_ok = lines.feed(piece, [&](std::string_view) { ++events; }).has_value();
  }
  (void)sse.has_partial();
  (void)lines.take_rest();
  return 0;
}
