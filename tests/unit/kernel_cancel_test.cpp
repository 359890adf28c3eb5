// Cancelling a run (RunOptions::stop) and the loop's tool stream events,
// through the real Kernel with the replay provider, the streaming `chunks` test
// provider and SQLite memory.
#include <gtest/gtest.h>

#include <stop_token>

#include "kernex/kernel.hpp"
#include "kernex/plugin_host.hpp"
#include "kernex/trajectory_view.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using testing::read_lines;
using testing::TempDir;
using Kind = StreamEvent::Kind;

std::string text_line(const std::string& text) {
  return Json{{"text", text}, {"usage", {{"input_tokens", 10}, {"output_tokens", 5}}}}.dump();
}
Json call(const std::string& id, const std::string& name, Json arguments) {
  return Json{{"id", id}, {"name", name}, {"arguments", std::move(arguments)}};
}
std::string calls_line(const std::string& text, Json calls) {
  return Json{{"text", text},
              {"tool_calls", std::move(calls)},
              {"usage", {{"input_tokens", 10}, {"output_tokens", 5}}}}
      .dump();
}

// `stop_run` requests the run's stop and answers "stopping"; `echo` answers its
// text.
class StoppingToolbox final : public ToolExecutor {
 public:
  explicit StoppingToolbox(std::stop_source& source) : source_(source) {}
  Result<std::vector<ToolSpec>> list_tools(const Context&) override {
    return std::vector<ToolSpec>{{"stop_run", "", Json{{"type", "object"}}, {}},
                                 {"echo", "", Json{{"type", "object"}}, {}}};
  }
  Result<ToolResult> execute(const Context&, const RunHandles&, const ToolCall& call) override {
    if (call.name == "stop_run") source_.request_stop();
    return ToolResult{call.id, call.name,
                      call.name == "stop_run" ? "stopping" : call.arguments.value("text", ""),
                      false};
  }

 private:
  std::stop_source& source_;
};

class KernelCancel : public ::testing::Test {
 protected:
  std::unique_ptr<Kernel> kernel(const std::string& provider, Json provider_config) {
    Config config;
    config.provider.name = provider;
    config.provider.config = std::move(provider_config);
    config.plugin_dirs = {KERNEX_KERNEL_TEST_PLUGIN_DIR};
    config.data_dir = dir / "kdata";
    config.memory = PluginRef{"sqlite", Json::object()};
    config.toolboxes = std::vector<PluginRef>{PluginRef{"builtin", Json::object()}};
    config.pricing_file = std::filesystem::path(KERNEX_SOURCE_DIR) / "data/pricing.yaml";
    auto k = Kernel::create(std::move(config));
    EXPECT_TRUE(k) << k.error().describe();
    if (k) (*k)->add_toolbox(std::make_shared<StoppingToolbox>(source));
    return k ? std::move(*k) : nullptr;
  }
  std::unique_ptr<Kernel> replay(const std::vector<std::string>& lines) {
    std::string script;
    for (const auto& l : lines) script += l + "\n";
    return kernel("replay", {{"script", dir.write("script.jsonl", script).string()},
                             {"record", (dir / "record.jsonl").string()}});
  }
  std::size_t requests() { return read_lines(dir / "record.jsonl").size(); }
  std::vector<ContextEntry> saved(const std::string& conversation_id) {
    auto store =
        host.create_memory("sqlite", Json{{"path", (dir / "kdata" / "memory.db").string()}})
            .value();
    std::vector<ContextEntry> out;
    auto messages =
        store->conversation_messages(kernex::MemoryScope::local(), conversation_id, 0, 100).value();
    for (auto& m : messages) out.push_back(m.entry);
    return out;
  }
  Json run_end(const std::string& run_id) {
    auto events = read_trajectory(dir / "kdata" / "trajectories", run_id);
    EXPECT_TRUE(events) << events.error().describe();
    for (auto& e : events.value_or(std::vector<Json>{})) {
      if (e["type"] == "run_end") return e;
    }
    return Json();
  }
  RunOptions stoppable() {
    RunOptions options;
    options.stop = source.get_token();
    return options;
  }

  TempDir dir;
  std::stop_source source;
  PluginHost host = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
};

TEST_F(KernelCancel, StopRequestedBeforeTheRunMakesNoModelCall) {
  auto k = replay({text_line("never said")});
  source.request_stop();
  auto r = k->run(Request::from_text("u", "hello"), stoppable());
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->outcome, Outcome::Cancelled);
  EXPECT_EQ(r->turns, 0u);
  EXPECT_EQ(r->text, "");
  EXPECT_EQ(requests(), 0u);
  auto messages = saved(r->conversation_id);
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0].role, "user");
  EXPECT_EQ(run_end(r->run_id)["outcome"], "cancelled");
  EXPECT_EQ(to_json(*r)["outcome"], "cancelled");
}

TEST_F(KernelCancel, StopFromTheSinkKeepsThePartialAnswerInMemory) {
  auto k = kernel("chunks", {{"chunks", {"Hello ", "world", "!"}}});
  RunOptions options = stoppable();
  std::string streamed;
  options.sink = [&](const StreamEvent& e) {
    if (e.kind != Kind::TextDelta) return;
    streamed += e.text;
    source.request_stop();
  };
  auto r = k->run(Request::from_text("u", "greet me"), options);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->outcome, Outcome::Cancelled);
  EXPECT_EQ(r->text, "Hello ");
  EXPECT_EQ(streamed, "Hello ");
  auto messages = saved(r->conversation_id);
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[0].content, "greet me");
  EXPECT_EQ(messages[1].role, "assistant");
  EXPECT_EQ(messages[1].content, "Hello ");
  EXPECT_EQ(run_end(r->run_id)["outcome"], "cancelled");

  // The next run of the conversation sees the partial answer as history.
  source = std::stop_source();
  auto again = k->run(Request::from_text("u", "go on"), stoppable());
  ASSERT_TRUE(again) << again.error().describe();
  EXPECT_EQ(again->outcome, Outcome::EndTurn);
  EXPECT_EQ(again->text, "Hello world!");
  EXPECT_EQ(again->conversation_id, r->conversation_id);
  EXPECT_EQ(saved(r->conversation_id).size(), 4u);
}

TEST_F(KernelCancel, AProviderFailingWithoutAStopIsStillAnError) {
  auto k = replay({Json{{"error", "overloaded"}}.dump()});
  auto r = k->run(Request::from_text("u", "hello"), stoppable());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Provider);
}

TEST_F(KernelCancel, StopBetweenToolCallsSkipsTheRestAndTheNextModelCall) {
  auto k =
      replay({calls_line("Working on it.", Json::array({call("a", "stop_run", Json::object()),
                                                        call("b", "echo", {{"text", "never"}})})),
              text_line("unreached")});
  auto r = k->run(Request::from_text("u", "do two things"), stoppable());
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->outcome, Outcome::Cancelled);
  EXPECT_EQ(r->turns, 1u);
  EXPECT_EQ(r->text, "Working on it.");
  ASSERT_EQ(r->tool_calls.size(), 1u);
  EXPECT_EQ(r->tool_calls[0].result.content, "stopping");
  EXPECT_EQ(requests(), 1u);
  EXPECT_GT(r->usage.input_tokens, 0u);

  // Memory keeps a well-formed transcript: every call has a result, the skipped
  // one says so.
  auto messages = saved(r->conversation_id);
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_EQ(messages[1].tool_calls.size(), 2u);
  ASSERT_TRUE(messages[2].tool_result);
  EXPECT_EQ(messages[2].tool_result->content, "stopping");
  ASSERT_TRUE(messages[3].tool_result);
  EXPECT_EQ(messages[3].tool_result->call_id, "b");
  EXPECT_TRUE(messages[3].tool_result->is_error);
  EXPECT_EQ(messages[3].tool_result->content, "Tool call not run: the run was cancelled");
  auto store =
      host.create_memory("sqlite", Json{{"path", (dir / "kdata" / "memory.db").string()}}).value();
  EXPECT_EQ(store->usage_by_day(kernex::MemoryScope::local()).value().at(0).usage.input_tokens,
            10u);
}

TEST_F(KernelCancel, StopDuringTheLastToolEndsTheRunBeforeTheNextModelCall) {
  auto k = replay({calls_line("", Json::array({call("a", "stop_run", Json::object())})),
                   text_line("unreached")});
  auto r = k->run(Request::from_text("u", "stop"), stoppable());
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->outcome, Outcome::Cancelled);
  EXPECT_EQ(r->text, "");
  EXPECT_EQ(r->tool_calls.size(), 1u);
  EXPECT_EQ(requests(), 1u);
  EXPECT_EQ(saved(r->conversation_id).size(),
            3u);  // user, assistant call, tool result
}

TEST_F(KernelCancel, ToolRunAndToolResultSurroundEachToolRun) {
  auto k = replay({calls_line("", Json::array({call("c1", "calculate", {{"expression", "6*7"}}),
                                               call("c2", "no_such_tool", Json::object())})),
                   text_line("42")});
  std::vector<StreamEvent> events;
  RunOptions options;
  options.sink = [&](const StreamEvent& e) { events.push_back(e); };
  auto r = k->run(Request::from_text("u", "six times seven"), options);
  ASSERT_TRUE(r) << r.error().describe();
  ASSERT_EQ(r->outcome, Outcome::EndTurn);

  std::vector<Kind> kinds;
  for (const auto& e : events) kinds.push_back(e.kind);
  const std::vector<Kind> expected{Kind::ToolCallStart, Kind::ToolCallDelta, Kind::ToolCallEnd,
                                   Kind::ToolCallStart, Kind::ToolCallDelta, Kind::ToolCallEnd,
                                   Kind::Usage,         Kind::Done,          Kind::ToolRun,
                                   Kind::ToolResult,    Kind::ToolRun,       Kind::ToolResult,
                                   Kind::TextDelta,     Kind::Usage,         Kind::Done};
  ASSERT_EQ(kinds, expected);
  const StreamEvent& run = events[8];
  EXPECT_EQ(run.tool_call_id, "c1");
  EXPECT_EQ(run.tool_name, "calculate");
  EXPECT_EQ(Json::parse(run.text), (Json{{"expression", "6*7"}}));
  const StreamEvent& result = events[9];
  EXPECT_EQ(result.tool_call_id, "c1");
  EXPECT_EQ(result.tool_name, "calculate");
  EXPECT_EQ(result.text, "42");
  EXPECT_FALSE(result.is_error);
  EXPECT_EQ(events[11].tool_call_id, "c2");
  EXPECT_TRUE(events[11].is_error);
  EXPECT_EQ(events[11].text, "Unknown tool: no_such_tool");
}

}  // namespace
}  // namespace kernex
