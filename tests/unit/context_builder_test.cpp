// Context building from memory: history, compaction by drop or summary, stored summaries.
#include <gtest/gtest.h>

#include "context_builder.hpp"
#include "kernex/kernel.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using testing::read_lines;
using testing::TempDir;

class CountingSummarizer : public Summarizer {
 public:
  Result<std::string> summarize(const std::string& text) override {
    ++calls;
    last_input = text;
    if (fail) return kernex::fail(ErrorCode::Provider, "summarizer down");
    if (empty) return std::string();
    return "SUMMARY(" + std::to_string(text.size()) + "chars)";
  }
  int calls = 0;
  bool fail = false;
  bool empty = false;
  std::string last_input;
};

class ContextBuilder : public ::testing::Test {
 protected:
  // A kernel with volatile memory whose replay script answers `answers` plain texts, and
  // optionally a tool exchange first.
  // With `host_summarizer` false the run's own provider summarises.
  std::unique_ptr<Kernel> kernel(const std::vector<std::string>& lines, Limits limits,
                                 bool host_summarizer = true) {
    std::string script;
    for (const auto& l : lines) script += l + "\n";
    Config config;
    config.system_prompt = "BASE PROMPT";
    config.provider.name = "replay";
    config.provider.config = {{"script", dir.write("script.jsonl", script).string()},
                              {"record", (dir / "record.jsonl").string()}};
    config.memory = PluginRef{"volatile", Json::object()};
    config.toolboxes = std::vector<PluginRef>{PluginRef{"builtin", Json::object()}};
    config.pricing_file = std::filesystem::path(KERNEX_SOURCE_DIR) / "data/pricing.yaml";
    config.limits = limits;
    auto k = Kernel::create(std::move(config));
    EXPECT_TRUE(k) << k.error().describe();
    if (host_summarizer) (*k)->set_summarizer(summarizer);
    return std::move(*k);
  }
  Json request(std::size_t i) {
    auto lines = read_lines(dir / "record.jsonl");
    return Json::parse(lines.at(i));
  }
  static std::string text(const std::string& t) { return Json{{"text", t}}.dump(); }

  TempDir dir;
  std::shared_ptr<CountingSummarizer> summarizer = std::make_shared<CountingSummarizer>();
};

TEST_F(ContextBuilder, DefectProjectKeyMismatchNoProjectSeesOwnHistory) {
  // kernex read history under project "" but wrote it under "default"; here one key does both.
  auto k = kernel({text("first answer"), text("second answer")}, Limits{});
  ASSERT_TRUE(k->run(Request::from_text("u1", "hello")));
  auto second = k->run(Request::from_text("u1", "again"));
  ASSERT_TRUE(second);
  const Json req = request(1);
  const Json& messages = req["messages"];
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_EQ(messages[0]["content"], "hello");
  EXPECT_EQ(messages[1]["content"], "first answer");
  EXPECT_EQ(messages[2]["content"], "again");
}

TEST_F(ContextBuilder, SendersDoNotSeeEachOthersHistory) {
  auto k = kernel({text("a"), text("b")}, Limits{});
  ASSERT_TRUE(k->run(Request::from_text("alice", "secret")));
  ASSERT_TRUE(k->run(Request::from_text("bob", "hi")));
  EXPECT_EQ(request(1)["messages"].size(), 1u);
}

TEST_F(ContextBuilder, DefectMaxContextMessagesIgnoredDropKeepsNewest) {
  Limits limits;
  limits.max_context_messages = 2;
  auto k = kernel({text("a1"), text("a2"), text("a3")}, limits);
  for (auto m : {"m1", "m2", "m3"}) ASSERT_TRUE(k->run(Request::from_text("u", m)));
  const Json& req = request(2);
  ASSERT_EQ(req["messages"].size(), 3u);  // 2 history + current
  EXPECT_EQ(req["messages"][0]["content"], "m2");
  EXPECT_EQ(req["messages"][1]["content"], "a2");
  EXPECT_EQ(req["system"], "BASE PROMPT");  // Drop: no summary header
  EXPECT_EQ(summarizer->calls, 0);
}

TEST_F(ContextBuilder, SummarizeAppendsSummaryAfterBasePrompt) {
  Limits limits;
  limits.max_context_messages = 2;
  limits.compaction = CompactionStrategy::Summarize;
  auto k = kernel({text("a1"), text("a2"), text("a3")}, limits);
  for (auto m : {"m1", "m2", "m3"}) ASSERT_TRUE(k->run(Request::from_text("u", m)));
  const std::string system = request(2)["system"];
  // DefectSummaryPrependedBeforeBasePrompt: the base prompt stays first, so its cache prefix holds.
  EXPECT_EQ(system.rfind("BASE PROMPT", 0), 0u) << system;
  EXPECT_NE(system.find("[Earlier conversation summary]\nSUMMARY("), std::string::npos) << system;
  EXPECT_EQ(summarizer->last_input, "user: m1\nassistant: a1");
}

TEST_F(ContextBuilder, DefectSummaryRecomputedEveryTurn) {
  Limits limits;
  limits.max_context_messages = 2;
  limits.compaction = CompactionStrategy::Summarize;
  auto k = kernel({text("a1"), text("a2"), text("a3"), text("a4")}, limits);
  for (auto m : {"m1", "m2", "m3"}) ASSERT_TRUE(k->run(Request::from_text("u", m)));
  EXPECT_EQ(summarizer->calls, 1);
  // The next turn overflows by two more messages: only those are summarised, with the stored
  // summary.
  ASSERT_TRUE(k->run(Request::from_text("u", "m4")));
  EXPECT_EQ(summarizer->calls, 2);
  EXPECT_EQ(summarizer->last_input.rfind("Summary so far:\nSUMMARY(", 0), 0u)
      << summarizer->last_input;
  EXPECT_NE(summarizer->last_input.find("user: m2\nassistant: a2"), std::string::npos);
  EXPECT_EQ(summarizer->last_input.find("m1"), std::string::npos);
}

TEST_F(ContextBuilder, SummarizerFailureFallsBackToDrop) {
  Limits limits;
  limits.max_context_messages = 2;
  limits.compaction = CompactionStrategy::Summarize;
  summarizer->fail = true;
  auto k = kernel({text("a1"), text("a2"), text("a3")}, limits);
  for (auto m : {"m1", "m2", "m3"}) ASSERT_TRUE(k->run(Request::from_text("u", m)));
  EXPECT_EQ(request(2)["system"], "BASE PROMPT");
  EXPECT_EQ(request(2)["messages"].size(), 3u);
}

TEST_F(ContextBuilder, EmptySummaryFallsBackToDrop) {
  Limits limits;
  limits.max_context_messages = 2;
  limits.compaction = CompactionStrategy::Summarize;
  summarizer->empty = true;
  auto k = kernel({text("a1"), text("a2"), text("a3")}, limits);
  for (auto m : {"m1", "m2", "m3"}) ASSERT_TRUE(k->run(Request::from_text("u", m)));
  EXPECT_EQ(request(2)["system"], "BASE PROMPT");
}

TEST_F(ContextBuilder, ToolCallIsNeverSeparatedFromItsResult) {
  // Exchange 1 stores: user, assistant(tool call), tool result, assistant = 4 messages.
  Limits limits;
  limits.max_context_messages = 2;
  Json call{{"tool_calls",
             {{{"id", "c1"}, {"name", "calculate"}, {"arguments", {{"expression", "1+1"}}}}}}};
  auto k = kernel({call.dump(), text("two"), text("next")}, limits);
  ASSERT_TRUE(k->run(Request::from_text("u", "add")));
  ASSERT_TRUE(k->run(Request::from_text("u", "more")));
  // The newest 2 would start with the orphaned tool result; it goes with its call.
  const Json req = request(2);
  const Json& messages = req["messages"];
  ASSERT_EQ(messages.size(), 2u) << messages.dump();
  EXPECT_EQ(messages[0]["content"], "two");
  EXPECT_EQ(messages[1]["content"], "more");
}

TEST(FirstWholeExchange, SkipsLeadingToolResults) {
  std::vector<ContextEntry> window{ContextEntry::tool(ToolResult{"c", "t", "r", false}),
                                   ContextEntry::assistant("a"), ContextEntry::user("u")};
  EXPECT_EQ(first_whole_exchange(window), 1u);
  EXPECT_EQ(first_whole_exchange({}), 0u);
}

TEST(RenderForSummary, KernexLineFormat) {
  EXPECT_EQ(render_for_summary({ContextEntry::user("hi"), ContextEntry::assistant("hello")}),
            "user: hi\nassistant: hello");
}

TEST_F(ContextBuilder, DefectSummarizerRunsWithTools) {
  // Without a host summarizer the run's provider summarises, with tools switched off so
  // compaction can't run tools outside the loop's hooks and rules.
  Limits limits;
  limits.max_context_messages = 2;
  limits.compaction = CompactionStrategy::Summarize;
  auto k = kernel({text("a1"), text("a2"), text("the gist"), text("a3")}, limits,
                  /*host_summarizer=*/false);
  for (auto m : {"m1", "m2", "m3"}) ASSERT_TRUE(k->run(Request::from_text("u", m)));
  const Json summarise = request(2);
  EXPECT_TRUE(summarise["tools"].empty());
  EXPECT_NE(summarise["messages"][0]["content"].get<std::string>().find("user: m1\nassistant: a1"),
            std::string::npos);
  EXPECT_NE(
      request(3)["system"].get<std::string>().find("[Earlier conversation summary]\nthe gist"),
      std::string::npos);
  EXPECT_FALSE(request(3)["tools"].empty());
}

// The sections memory fills in, formatted (from the stores: memory_conformance_test).

TEST(MemorySections, RecallPreviewKeepsCharactersWhole) {
  std::string han;
  for (int i = 0; i < 100; ++i) han += "中";
  const std::string s = recall_section({RecallHit{"message", "c", 1, han, "2026-01-01 00:00:00"}});
  const std::string expected_preview = han.substr(0, 198) + "...";
  EXPECT_EQ(s, "Related past context:\n- [2026-01-01 00:00:00] User: " + expected_preview);
}

TEST(MemorySections, ProfileOrderAndSystemKeysHidden) {
  EXPECT_EQ(profile_section({{"active_project", "x"}, {"welcomed", "1"}}), "");
  EXPECT_EQ(profile_section(
                {{"hobby", "chess"}, {"location", "Lyon"}, {"name", "Ana"}, {"pronouns", "she"}}),
            "User profile:\n- name: Ana\n- pronouns: she\n- location: Lyon\n- hobby: chess");
  Task t;
  t.id = "0123456789";
  t.spec.description = "deploy";
  t.spec.task_type = "action";
  t.spec.project = "web";
  t.spec.due_at = "2026-01-01 00:00:00";
  t.spec.repeat = "daily";
  EXPECT_EQ(tasks_section({t}),
            "User's scheduled tasks:\n- [01234567] deploy [action] (web) (due: 2026-01-01 "
            "00:00:00, daily)");
  EXPECT_EQ(outcomes_section({OutcomeRecord{"a", "d", -1, "l", "c", "", "2026-01-01 00:00:00"}},
                             "2026-01-03 01:00:00"),
            "Recent outcomes:\n- [-] d: l (2d ago)");
}

}  // namespace
}  // namespace kernex
