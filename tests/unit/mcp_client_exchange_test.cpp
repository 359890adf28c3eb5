// The MCP client's exchange apart from the server process (mcp/src/client_exchange.hpp) and the
// line framing it reads through (sandbox::LineBuffer).
#include <gtest/gtest.h>

#include <deque>

#include "client_exchange.hpp"
#include "kernex/mcp/jsonrpc.hpp"
#include "kernex/sandbox/line_buffer.hpp"

namespace {

using namespace kernex;

TEST(LineBuffer, SplitsLinesAcrossChunksAndKeepsCarriageReturns) {
  sandbox::LineBuffer lines;
  lines.append("ab");
  EXPECT_EQ(lines.next_line(100).value(), std::nullopt);
  lines.append("c\r\n\nde");
  EXPECT_EQ(lines.next_line(100).value(), std::optional<std::string>("abc\r"));
  EXPECT_EQ(lines.next_line(100).value(), std::optional<std::string>(""));
  EXPECT_EQ(lines.next_line(100).value(), std::nullopt);
  EXPECT_EQ(lines.pending(), 2u);
  lines.append("f\n");
  EXPECT_EQ(lines.next_line(100).value(), std::optional<std::string>("def"));
  EXPECT_EQ(lines.pending(), 0u);
}

TEST(LineBuffer, RefusesALineOverTheCapWholeOrSoFar) {
  sandbox::LineBuffer whole;
  whole.append("12345\n");
  EXPECT_EQ(whole.next_line(4).error().code, ErrorCode::Limit);
  sandbox::LineBuffer partial;
  partial.append("12345");
  EXPECT_EQ(partial.next_line(4).error().code, ErrorCode::Limit);
  sandbox::LineBuffer exact;
  exact.append("1234\n");
  EXPECT_EQ(exact.next_line(4).value(), std::optional<std::string>("1234"));
}

// A chunk of 200 000 blank lines: the lines taken are dropped lazily, so what stays buffered
// never holds more than the chunk (each line used to move the whole rest of the buffer).
TEST(LineBuffer, ManyLinesInOneChunkEachTakenOnce) {
  sandbox::LineBuffer lines;
  lines.append(std::string(200'000, '\n'));
  std::size_t taken = 0;
  while (auto line = lines.next_line(10).value()) {
    EXPECT_TRUE(line->empty());
    ++taken;
  }
  EXPECT_EQ(taken, 200'000u);
  EXPECT_EQ(lines.pending(), 0u);
}

mcp::detail::ServerLink link_over(std::deque<std::string>& lines, std::vector<Json>& sent) {
  mcp::detail::ServerLink link;
  link.who = "MCP server 't'";
  link.read_line = [&lines]() -> Result<std::string> {
    if (lines.empty()) return fail(ErrorCode::Io, "closed");
    std::string line = std::move(lines.front());
    lines.pop_front();
    return line;
  };
  link.send = [&sent](const Json& m) -> Result<void> {
    sent.push_back(m);
    return {};
  };
  link.broken = [](const std::string& what) { return Error(ErrorCode::Tool, what); };
  link.tools_changed = [] {};
  return link;
}

TEST(McpClientExchange, AnswersPingsSkipsOtherIdsAndReturnsTheResult) {
  std::deque<std::string> lines = {
      "", R"({"jsonrpc":"2.0","id":"s1","method":"ping"})",
      R"({"jsonrpc":"2.0","id":"s2","method":"sampling/createMessage"})",
      R"({"jsonrpc":"2.0","id":6,"result":{"x":0}})",
      R"({"jsonrpc":"2.0","id":7,"result":{"x":1}})"};
  std::vector<Json> sent;
  auto got = mcp::detail::await_response(link_over(lines, sent), 7, "tools/call");
  ASSERT_TRUE(got) << got.error().describe();
  EXPECT_EQ((*got)["x"], 1);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_TRUE(sent[0].contains("result"));
  EXPECT_EQ(sent[1]["error"]["code"], mcp::jsonrpc::kMethodNotFound);
}

TEST(McpClientExchange, NotJsonRpcIsBroken) {
  std::deque<std::string> lines = {"this is not json"};
  std::vector<Json> sent;
  auto got = mcp::detail::await_response(link_over(lines, sent), 1, "initialize");
  ASSERT_FALSE(got);
  EXPECT_NE(got.error().message.find("not JSON-RPC"), std::string::npos);
}

// Pages each under the line cap add up: the client keeps at most 64 MiB of tools.
TEST(McpClientExchange, ToolsListKeepsABoundedAmountOfTools) {
  int pages = 0;
  const std::string big(1u << 20, 'd');
  auto listed = mcp::detail::list_all_tools(
      [&](const std::optional<Json>&) -> Result<Json> {
        ++pages;
        Json tools = Json::array();
        for (int i = 0; i < 4; ++i)
          tools.push_back({{"name", "t" + std::to_string(i)}, {"description", big}});
        return Json{{"tools", tools}, {"nextCursor", "c" + std::to_string(pages)}};
      },
      "MCP server 't'");
  ASSERT_FALSE(listed);
  EXPECT_NE(listed.error().message.find("MiB of tools"), std::string::npos);
  EXPECT_LE(pages, 17);
}

}  // namespace
