// The replay provider plugin, loaded from the build tree like any other plugin.
#include <gtest/gtest.h>

#include <chrono>
#include <stop_token>
#include <thread>

#include "kernex/plugin_host.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using testing::read_lines;
using testing::TempDir;

class Replay : public ::testing::Test {
 protected:
  Result<std::shared_ptr<Provider>> make(const Json& config) {
    return host.create_provider("replay", config);
  }
  PluginHost host = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
  TempDir dir;
};

TEST_F(Replay, PlaysLinesInOrderAndRecordsEachRequest) {
  auto script = dir.write(
      "s.jsonl",
      R"({"text":"thinking...","tool_calls":[{"id":"c1","name":"t","arguments":{"a":1}}],)"
      R"("usage":{"input_tokens":3,"output_tokens":2,"cache_read_tokens":7,"cache_write_tokens":1}})"
      "\n\n"
      R"({"text":"done","model":"m-1","stop_reason":"end_turn"})"
      "\n");
  auto provider = make({{"script", script.string()}, {"record", (dir / "rec.jsonl").string()}});
  ASSERT_TRUE(provider) << provider.error().describe();
  Context ctx("hello");
  ctx.system_prompt = "sys";
  auto first =
      (*provider)->complete(ctx, {ToolSpec{"t", "a tool", Json{{"type", "object"}}, {}}}, {});
  ASSERT_TRUE(first);
  EXPECT_EQ(first->text, "thinking...");
  ASSERT_EQ(first->tool_calls.size(), 1u);
  EXPECT_EQ(first->tool_calls[0].id, "c1");
  EXPECT_EQ(first->tool_calls[0].arguments, (Json{{"a", 1}}));
  EXPECT_EQ(first->stop_reason, "tool_use");
  EXPECT_EQ(first->usage, (Usage{3, 2, 7, 1, 0.0}));
  auto second = (*provider)->complete(ctx, {}, {});
  ASSERT_TRUE(second);
  EXPECT_EQ(second->text, "done");
  EXPECT_EQ(second->model, "m-1");

  auto lines = read_lines(dir / "rec.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  Json rec = Json::parse(lines[0]);
  EXPECT_EQ(rec["system"], "sys");
  EXPECT_EQ(rec["messages"][0]["content"], "hello");
  EXPECT_EQ(rec["tools"][0]["name"], "t");
}

TEST_F(Replay, StreamsTextToolCallsUsageThenDone) {
  auto script =
      dir.write("s.jsonl", R"({"text":"hi","thinking":"hmm","tool_calls":[{"id":"c","name":"t"}]})"
                           "\n");
  auto provider = make({{"script", script.string()}});
  ASSERT_TRUE(provider);
  std::vector<StreamEvent> events;
  auto r =
      (*provider)->complete(Context("x"), {}, [&](const StreamEvent& e) { events.push_back(e); });
  ASSERT_TRUE(r);
  using K = StreamEvent::Kind;
  std::vector<K> kinds;
  for (const auto& e : events) kinds.push_back(e.kind);
  EXPECT_EQ(kinds, (std::vector<K>{K::ThinkingDelta, K::TextDelta, K::ToolCallStart,
                                   K::ToolCallDelta, K::ToolCallEnd, K::Usage, K::Done}));
  StreamAccumulator acc;
  for (const auto& e : events) acc.push(e);
  EXPECT_EQ(acc.text(), "hi");
}

TEST_F(Replay, ScriptedErrorLineIsAProviderError) {
  auto script = dir.write("s.jsonl", R"({"error":"HTTP 529 overloaded"})"
                                     "\n");
  auto provider = make({{"script", script.string()}});
  ASSERT_TRUE(provider);
  auto r = (*provider)->complete(Context("x"), {}, {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Provider);
  EXPECT_EQ(r.error().message, "HTTP 529 overloaded");
}

TEST_F(Replay, AStoppedRunIsCancelledAtOnceAndKeepsItsLine) {
  auto script = dir.write("s.jsonl", R"({"text":"kept"})"
                                     "\n");
  auto provider = make({{"script", script.string()}});
  ASSERT_TRUE(provider);
  std::stop_source source;
  source.request_stop();
  Context stopped("x");
  stopped.stop = source.get_token();
  auto r = (*provider)->complete(stopped, {}, {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Cancelled);
  auto next = (*provider)->complete(Context("x"), {}, {});
  ASSERT_TRUE(next) << next.error().message;
  EXPECT_EQ(next->text, "kept");
}

TEST_F(Replay, DelayedLineWaitsUntilTheStopToken) {
  auto script = dir.write("s.jsonl", R"({"text":"late","delay_ms":60000})"
                                     "\n"
                                     R"({"text":"soon","delay_ms":5})"
                                     "\n");
  auto provider = make({{"script", script.string()}});
  ASSERT_TRUE(provider);
  std::stop_source source;
  Context ctx("x");
  ctx.stop = source.get_token();
  const auto began = std::chrono::steady_clock::now();
  // Whether the stop lands before or during the wait, the call ends cancelled, long before 60 s.
  std::jthread canceller([&] { source.request_stop(); });
  auto r = (*provider)->complete(ctx, {}, {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Cancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(5));
  // A stop before the call keeps the line (AStoppedRunIsCancelledAtOnceAndKeepsItsLine), one during
  // the wait plays it: the next line is "late" or "soon" by timing, so only a stopped call follows.
  std::stop_source stopped;
  stopped.request_stop();
  Context again("x");
  again.stop = stopped.get_token();
  auto next = (*provider)->complete(again, {}, {});
  ASSERT_FALSE(next);
  EXPECT_EQ(next.error().code, ErrorCode::Cancelled);
  EXPECT_FALSE(make({{"script", dir.write("bad.jsonl", R"({"delay_ms":-1})"
                                                       "\n")
                                    .string()}}));
}

TEST_F(Replay, RunningOutSaysHowManyLinesTheScriptHas) {
  auto script = dir.write("s.jsonl", R"({"text":"only"})"
                                     "\n");
  auto provider = make({{"script", script.string()}});
  ASSERT_TRUE(provider);
  ASSERT_TRUE((*provider)->complete(Context("x"), {}, {}));
  auto r = (*provider)->complete(Context("x"), {}, {});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("no response left for request 2 (it holds 1)"),
            std::string::npos);
}

TEST_F(Replay, BadConfigAndScriptsAreErrorsNamingTheProblem) {
  auto missing = make({{"script", (dir / "nope.jsonl").string()}});
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().describe().find("nope.jsonl"), std::string::npos);

  auto no_script = make(Json::object());
  ASSERT_FALSE(no_script);
  EXPECT_NE(no_script.error().describe().find("`script`"), std::string::npos);

  auto unknown = make({{"script", "x"}, {"speed", "fast"}});
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().describe().find(
                "option `speed`: unknown key (expected one of: script, record)"),
            std::string::npos);

  auto nameless = dir.write("bad.jsonl", R"({"text":"a"})"
                                         "\n"
                                         R"({"tool_calls":[{"id":"x"}]})"
                                         "\n");
  auto bad = make({{"script", nameless.string()}});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().describe().find("bad.jsonl:2: tool_calls[0]"), std::string::npos)
      << bad.error().describe();

  auto wrong_types = dir.write("types.jsonl", R"({"usage":{"input_tokens":"many"}})"
                                              "\n");
  auto typed = make({{"script", wrong_types.string()}});
  ASSERT_FALSE(typed);
  EXPECT_NE(typed.error().describe().find("types.jsonl:1"), std::string::npos)
      << typed.error().describe();
}

}  // namespace
}  // namespace kernex
