// The server side (`kernex mcp serve`): JSON-RPC framing, version negotiation and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <streambuf>
#include <vector>

#include "kernex/mcp/jsonrpc.hpp"
#include "kernex/mcp/server.hpp"

namespace {

using namespace kernex;
using namespace kernex::mcp;

StdioServer make_server() {
  ServerHandlers h;
  h.list_tools = []() -> Result<std::vector<ToolSpec>> {
    ToolSpec t;
    t.name = "upper";
    t.description = "Upper-cases text";
    t.parameters = Json{{"type", "object"}, {"properties", {{"text", {{"type", "string"}}}}}};
    return std::vector<ToolSpec>{t};
  };
  h.call_tool = [](const std::string& name, const Json& args) -> Result<ToolResult> {
    if (!args.contains("text")) return ToolResult{"", name, "missing text", true};
    std::string s = args["text"].get<std::string>();
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return ToolResult{"", name, s, false};
  };
  return StdioServer(ServerInfo{}, h);
}

Json req(int id, const std::string& method, Json params = nullptr) {
  return params.is_null() ? jsonrpc::request(id, method) : jsonrpc::request(id, method, params);
}

// Serves `in` to its end; every line written, parsed.
std::vector<Json> serve_all(StdioServer& server, std::istream& in) {
  std::ostringstream out;
  server.serve(in, out);
  std::istringstream lines(out.str());
  std::vector<Json> answers;
  for (std::string line; std::getline(lines, line);) answers.push_back(Json::parse(line));
  return answers;
}

TEST(McpServer, NegotiatesTheProtocolVersion) {
  auto server = make_server();
  auto r = server.handle(req(1, "initialize",
                             {{"protocolVersion", "2025-03-26"},
                              {"capabilities", Json::object()},
                              {"clientInfo", {{"name", "t"}, {"version", "1"}}}}));
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["result"]["protocolVersion"], "2025-03-26");
  EXPECT_EQ((*r)["result"]["serverInfo"]["name"], "kernex");
  EXPECT_TRUE((*r)["result"]["capabilities"].contains("tools"));
  r = server.handle(req(2, "initialize", {{"protocolVersion", "2030-01-01"}}));
  EXPECT_EQ((*r)["result"]["protocolVersion"], "2025-06-18");
  EXPECT_FALSE(server.handle(jsonrpc::notification("notifications/initialized")));
  EXPECT_TRUE(server.initialized());
}

TEST(McpServer, ListsAndCallsTools) {
  auto server = make_server();
  auto list = server.handle(req(1, "tools/list"));
  ASSERT_TRUE(list);
  EXPECT_EQ((*list)["result"]["tools"][0]["name"], "upper");
  EXPECT_EQ((*list)["result"]["tools"][0]["inputSchema"]["type"], "object");
  auto call =
      server.handle(req(2, "tools/call", {{"name", "upper"}, {"arguments", {{"text", "abc"}}}}));
  ASSERT_TRUE(call);
  EXPECT_EQ((*call)["id"], 2);
  EXPECT_EQ((*call)["result"]["content"][0]["text"], "ABC");
  EXPECT_EQ((*call)["result"]["isError"], false);
  auto failed = server.handle(req(3, "tools/call", {{"name", "upper"}}));
  EXPECT_EQ((*failed)["result"]["isError"], true);
}

TEST(McpServer, JsonRpcErrors) {
  auto server = make_server();
  EXPECT_EQ((*server.handle(req(1, "resources/list")))["error"]["code"], -32601);
  EXPECT_EQ((*server.handle(req(2, "tools/call", {{"name", "nope"}})))["error"]["code"], -32602);
  EXPECT_EQ(
      (*server.handle(req(3, "tools/call", {{"arguments", Json::object()}})))["error"]["code"],
      -32602);
  EXPECT_EQ((*server.handle(
                req(4, "tools/call", {{"name", "upper"}, {"arguments", "x"}})))["error"]["code"],
            -32602);
  EXPECT_EQ((*server.handle(req(5, "initialize", Json::object())))["error"]["code"], -32602);
  EXPECT_EQ((*server.handle(req(6, "tools/list", {{"cursor", "zzz"}})))["error"]["code"], -32602);
  auto parse = server.handle_line("{not json");
  EXPECT_EQ((*parse)["error"]["code"], -32700);
  EXPECT_TRUE((*parse)["id"].is_null());
  auto invalid = server.handle(Json{{"jsonrpc", "1.0"}, {"id", 7}, {"method", "ping"}});
  EXPECT_EQ((*invalid)["error"]["code"], -32600);
  EXPECT_EQ((*invalid)["id"], 7);
  EXPECT_EQ((*server.handle(Json::array()))["error"]["code"], -32600);
  EXPECT_EQ((*server.handle(req(8, "ping")))["result"], Json::object());
  EXPECT_FALSE(server.handle_line("   "));
}

TEST(McpServer, ServeAnswersLineByLine) {
  auto server = make_server();
  std::istringstream in(
      jsonrpc::frame(req(1, "ping")) +
      jsonrpc::frame(jsonrpc::notification("notifications/initialized")) +
      jsonrpc::frame(req(2, "tools/call", {{"name", "upper"}, {"arguments", {{"text", "x\ny"}}}})));
  const auto answers = serve_all(server, in);
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[0]["id"], 1);
  EXPECT_EQ(answers[1]["result"]["content"][0]["text"], "X\nY");
}

// `prefix`, then `n` bytes of 'a', then `suffix`, made as they are read: a 50 MB line costs the
// test 64 KiB.
class GeneratedInput : public std::streambuf {
 public:
  GeneratedInput(std::string prefix, std::size_t n, std::string suffix)
      : text_{std::move(prefix), std::move(suffix)}, n_(n), buf_(64 * 1024) {}

 protected:
  int_type underflow() override {
    std::size_t len = 0;
    while (len < buf_.size() && part_ < 3) {
      const std::size_t size = part_ == 1 ? n_ : text_[part_ / 2].size();
      const std::size_t k = std::min(buf_.size() - len, size - at_);
      if (part_ == 1)
        std::fill_n(buf_.data() + len, k, 'a');
      else
        std::copy_n(text_[part_ / 2].data() + at_, k, buf_.data() + len);
      len += k;
      at_ += k;
      if (at_ == size) ++part_, at_ = 0;
    }
    if (len == 0) return traits_type::eof();
    setg(buf_.data(), buf_.data(), buf_.data() + len);
    return traits_type::to_int_type(buf_[0]);
  }

 private:
  std::string text_[2];
  std::size_t n_;
  std::vector<char> buf_;
  int part_ = 0;
  std::size_t at_ = 0;
};

TEST(McpJsonRpc, ReadLineSkipsAnOverLongLineWithoutBufferingIt) {
  GeneratedInput source("{\"x\":\"", 50u << 20, "\"}\nnext\nlast");
  std::istream in(&source);
  std::string line;
  EXPECT_EQ(jsonrpc::read_line(in, line, 1024), jsonrpc::LineRead::TooLong);
  EXPECT_TRUE(line.empty());
  EXPECT_LE(line.capacity(), 64u * 1024);  // dropped as it came, never grown to 50 MB
  EXPECT_EQ(jsonrpc::read_line(in, line, 1024), jsonrpc::LineRead::Line);
  EXPECT_EQ(line, "next");
  EXPECT_EQ(jsonrpc::read_line(in, line, 1024), jsonrpc::LineRead::Line);
  EXPECT_EQ(line, "last");  // the last line needs no '\n'
  EXPECT_EQ(jsonrpc::read_line(in, line, 1024), jsonrpc::LineRead::End);
}

TEST(McpJsonRpc, ReadLineKeepsLinesUpToTheCapAcrossBufferBoundaries) {
  for (std::size_t n : {std::size_t{0}, std::size_t{65534}, std::size_t{65535}, std::size_t{65536},
                        std::size_t{200000}}) {
    GeneratedInput source("", n, "\n\n");
    std::istream in(&source);
    std::string line;
    ASSERT_EQ(jsonrpc::read_line(in, line, 200000), jsonrpc::LineRead::Line) << n;
    EXPECT_EQ(line.size(), n);
    ASSERT_EQ(jsonrpc::read_line(in, line, 200000), jsonrpc::LineRead::Line) << n;
    EXPECT_EQ(line, "");
    EXPECT_EQ(jsonrpc::read_line(in, line, 200000), jsonrpc::LineRead::End) << n;
  }
  GeneratedInput source("", 200001, "\n");
  std::istream in(&source);
  std::string line;
  EXPECT_EQ(jsonrpc::read_line(in, line, 200000), jsonrpc::LineRead::TooLong);
}

TEST(McpServer, ServeAnswersAnOverLongLineWithAnErrorAndGoesOn) {
  auto server = make_server();
  // A 50 MB request (the old loop buffered it whole, ~220 MB with the parse), then a ping.
  GeneratedInput source(R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"x":")",
                        50u << 20, "\"}}\n" + jsonrpc::frame(req(2, "ping")));
  std::istream in(&source);
  const auto answers = serve_all(server, in);
  ASSERT_EQ(answers.size(), 2u);
  const Json& refused = answers[0];
  EXPECT_EQ(refused["error"]["code"], -32600);
  EXPECT_TRUE(refused["id"].is_null());
  EXPECT_NE(refused["error"]["message"].get<std::string>().find(
                std::to_string(jsonrpc::kMaxServerLineBytes)),
            std::string::npos)
      << refused;
  EXPECT_EQ(answers[1]["id"], 2);
  EXPECT_EQ(answers[1]["result"], Json::object());
}

TEST(McpJsonRpc, ClassifiesMessages) {
  using jsonrpc::Kind;
  EXPECT_EQ(jsonrpc::classify(Json::parse(R"({"jsonrpc":"2.0","id":"a","method":"m"})")).kind,
            Kind::Request);
  EXPECT_EQ(jsonrpc::classify(Json::parse(R"({"jsonrpc":"2.0","method":"m"})")).kind,
            Kind::Notification);
  EXPECT_EQ(jsonrpc::classify(Json::parse(R"({"jsonrpc":"2.0","id":1,"result":null})")).kind,
            Kind::Response);
  EXPECT_EQ(jsonrpc::classify(
                Json::parse(R"({"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"x"}})"))
                .kind,
            Kind::Response);
  EXPECT_EQ(
      jsonrpc::classify(Json::parse(R"({"jsonrpc":"2.0","id":1,"error":{"message":"no code"}})"))
          .kind,
      Kind::Invalid);
  EXPECT_EQ(jsonrpc::classify(Json::parse(R"({"jsonrpc":"2.0","id":1.5,"method":"m"})")).kind,
            Kind::Invalid);
  EXPECT_EQ(jsonrpc::classify(Json::parse(R"({"jsonrpc":"2.0","id":1})")).kind, Kind::Invalid);
  const std::string framed = jsonrpc::frame(jsonrpc::request(1, "m", Json{{"text", "a\nb"}}));
  EXPECT_EQ(framed.find('\n'), framed.size() - 1);
  EXPECT_FALSE(jsonrpc::request(1, "m").contains("params"));
  EXPECT_FALSE(jsonrpc::notification("n").contains("id"));
}

}  // namespace
