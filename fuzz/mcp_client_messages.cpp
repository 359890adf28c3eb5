// The MCP client's handling of what a hostile server writes on stdout: the input is that output,
// split into lines by the client's LineBuffer and read through the client's own exchange
// (mcp/src/client_exchange.hpp: await_response, negotiated_version, list_all_tools) as one session:
// initialize, every page of tools/list, then one tools/call whose result is rendered into the
// kernel's tool result (render_call_result). The first byte picks the step the session starts at,
// so later steps are reached without a valid handshake, and the inline cap for binary content.
#include "client_exchange.hpp"
#include "fuzz.hpp"
#include "kernex/log.hpp"
#include "kernex/mcp/content.hpp"
#include "kernex/mcp/jsonrpc.hpp"
#include "kernex/sandbox/line_buffer.hpp"

KERNEX_FUZZ_TARGET(mcp_client_messages) {
  using namespace kernex;
  // Logs are formatted but not printed (a hostile server's logs would flood the run's output).
  [[maybe_unused]] static const bool quiet = [] {
    set_log_sink([](LogLevel, std::string_view) {});
    return true;
  }();
  if (size == 0) return 0;
  const int start = data[0] % 3;
  mcp::RenderOptions render;
  render.inline_binary_cap = std::size_t{16} << (data[0] / 3 % 8);

  sandbox::LineBuffer lines;
  lines.append(fuzz::text(data + 1, size - 1));
  lines.append("\n");  // the server's last line, unterminated, still counts before it exits
  std::size_t sent = 0;
  mcp::detail::ServerLink link;
  link.who = "MCP server 'fuzz'";
  link.read_line = [&]() -> Result<std::string> {
    auto line = lines.next_line(1u << 16);
    if (!line) return std::unexpected(link.broken("sent a line over the cap"));
    if (!*line) return std::unexpected(link.broken("closed its output"));
    return std::move(**line);
  };
  link.send = [&](const Json& message) -> Result<void> {
    sent += mcp::jsonrpc::frame(message).size();
    return {};
  };
  link.broken = [](const std::string& what) { return Error(ErrorCode::Tool, what); };
  link.tools_changed = [] {};

  std::int64_t id = 1;
  if (start == 0) {
    if (auto r = mcp::detail::await_response(link, id++, "initialize"))
      (void)mcp::detail::negotiated_version(*r);
  }
  if (start <= 1) {
    (void)mcp::detail::list_all_tools(
        [&](const std::optional<Json>&) {
          return mcp::detail::await_response(link, id++, "tools/list");
        },
        link.who);
  }
  if (auto r = mcp::detail::await_response(link, id++, "tools/call")) {
    const mcp::RenderedResult rendered = mcp::render_call_result(*r, render);
    (void)rendered.text.size();
  }
  return 0;
}
