// MCP's stdio framing: a server's stdout arriving in chunks of any size, split into lines by the
// client's LineBuffer (what SandboxedProcess::read_line reads through), each line parsed and
// classified as JSON-RPC, and every parsed message framed again. Checks, besides no crash: the
// lines are exactly the input's '\n'-separated pieces, and frame() gives one line that parses back
// to the same message.
#include <stdexcept>

#include "fuzz.hpp"
#include "kernex/mcp/jsonrpc.hpp"
#include "kernex/sandbox/line_buffer.hpp"

namespace {

void check_message(std::string_view line) {
  namespace rpc = kernex::mcp::jsonrpc;
  if (line.find_first_not_of(" \t\r") == std::string_view::npos)
    return;  // skipped, as the client does
  auto parsed = rpc::parse_line(line);
  if (!parsed) return;
  (void)rpc::classify(*parsed);
  const std::string framed = rpc::frame(*parsed);
  if (framed.empty() || framed.back() != '\n' || framed.find('\n') != framed.size() - 1)
    throw std::logic_error("frame() did not give exactly one line");
  auto again = rpc::parse_line(std::string_view(framed).substr(0, framed.size() - 1));
  if (!again || *again != *parsed) throw std::logic_error("a framed message reads back changed");
}

}  // namespace

KERNEX_FUZZ_TARGET(mcp_framing) {
  if (size == 0) return 0;
  // The first byte seeds the chunk sizes (1..64 bytes) and the line cap (64 B..16 KiB).
  unsigned state = data[0] | 1u;
  const std::size_t cap = std::size_t{64} << (data[0] % 9);
  const std::string_view input = kernex::fuzz::text(data + 1, size - 1);
  kernex::sandbox::LineBuffer lines;
  std::size_t at = 0;      // next byte of the input to deliver
  std::size_t expect = 0;  // where the next line should start in the input
  for (bool done = false; !done;) {
    state = state * 1103515245u + 12345u;
    const std::size_t chunk = std::min<std::size_t>(1 + (state >> 16) % 64, input.size() - at);
    lines.append(input.substr(at, chunk));
    at += chunk;
    for (;;) {
      auto line = lines.next_line(cap);
      if (!line) {
        done = true;  // over the cap: the client stops reading this server
        break;
      }
      if (!*line) break;
      const std::size_t nl = input.find('\n', expect);
      if (nl == std::string_view::npos || input.substr(expect, nl - expect) != **line)
        throw std::logic_error("LineBuffer gave a line the input does not hold there");
      expect = nl + 1;
      check_message(**line);
    }
    if (at == input.size()) done = true;
  }
  return 0;
}
