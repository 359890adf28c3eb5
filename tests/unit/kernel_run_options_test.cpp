// What a host sets per run (RunOptions: conversation key, history, extra prompt, sources,
// workspace) and many runs at once on one Kernel, as `kernex serve` does.
#include <gtest/gtest.h>

#include <latch>
#include <set>
#include <thread>

#include "kernex/kernel.hpp"
#include "kernex/plugin_host.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using testing::read_lines;
using testing::TempDir;

std::string text_line(const std::string& text, const std::string& match = "") {
  Json j{{"text", text}, {"usage", {{"input_tokens", 10}, {"output_tokens", 5}}}};
  if (!match.empty()) j["match"] = match;
  return j.dump();
}
std::string tool_line(const std::string& name, Json arguments, const std::string& match = "") {
  Json j{{"tool_calls", {{{"id", "c1"}, {"name", name}, {"arguments", std::move(arguments)}}}},
         {"usage", {{"input_tokens", 10}, {"output_tokens", 5}}}};
  if (!match.empty()) j["match"] = match;
  return j.dump();
}

// Appends its text to the system prompt and offers a `note` tool when asked to.
class PromptSource final : public ContextSource {
 public:
  explicit PromptSource(std::string text, bool offer_note = false)
      : text_(std::move(text)), offer_note_(offer_note) {}
  Result<void> contribute(Context& context, const Request&) override {
    context.system_prompt += (context.system_prompt.empty() ? "" : "\n\n") + text_;
    return {};
  }
  std::vector<std::shared_ptr<ContextTool>> context_tools(const Request&) override {
    if (!offer_note_) return {};
    return {std::make_shared<NoteTool>()};
  }

 private:
  class NoteTool final : public ContextTool {
   public:
    ToolSpec spec() const override {
      return {"note", "Takes a note", Json{{"type", "object"}}, {}};
    }
    Result<ToolResult> execute(Context&, const ToolCall& call) override {
      return ToolResult{call.id, call.name, "noted", false};
    }
  };
  std::string text_;
  bool offer_note_;
};

// `where` answers the run's workspace, `stoppable` whether the run can be stopped.
class ContextToolbox final : public ToolExecutor {
 public:
  Result<std::vector<ToolSpec>> list_tools(const Context&) override {
    return std::vector<ToolSpec>{{"where", "", Json{{"type", "object"}}, {}},
                                 {"stoppable", "", Json{{"type", "object"}}, {}}};
  }
  Result<ToolResult> execute(const Context& context, const RunHandles&,
                             const ToolCall& call) override {
    std::string answer = call.name == "where"
                             ? (context.workspace ? context.workspace->string() : "none")
                             : (context.stop.stop_possible() ? "yes" : "no");
    return ToolResult{call.id, call.name, answer, false};
  }
};

class KernelRunOptions : public ::testing::Test {
 protected:
  std::unique_ptr<Kernel> kernel(const std::vector<std::string>& lines, bool memory = true) {
    std::string script;
    for (const auto& l : lines) script += l + "\n";
    Config config;
    config.system_prompt = "BASE";
    config.channel = "cli";
    config.provider.name = "replay";
    config.provider.config = {{"script", dir.write("script.jsonl", script).string()},
                              {"record", (dir / "record.jsonl").string()}};
    config.data_dir = dir / "kdata";
    if (memory) config.memory = PluginRef{"sqlite", Json::object()};
    config.toolboxes = std::vector<PluginRef>{PluginRef{"builtin", Json::object()}};
    config.pricing_file = std::filesystem::path(KERNEX_SOURCE_DIR) / "data/pricing.yaml";
    auto k = Kernel::create(std::move(config));
    EXPECT_TRUE(k) << k.error().describe();
    if (k) (*k)->add_toolbox(std::make_shared<ContextToolbox>());
    return k ? std::move(*k) : nullptr;
  }
  Json request(std::size_t i) { return Json::parse(read_lines(dir / "record.jsonl").at(i)); }
  std::shared_ptr<MemoryStore> store() {
    return host.create_memory("sqlite", Json{{"path", (dir / "kdata" / "memory.db").string()}})
        .value();
  }

  TempDir dir;
  PluginHost host = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
};

// The kernel's audit hook hands a run's rows to a store that saves them with the exchange (one
// write per turn), records them one by one for a store that does not, and records on their own
// the rows of a run that saves no exchange: a call that ran is audited whichever way its run ends.
class KernelAudit : public KernelRunOptions {
 protected:
  std::unique_ptr<Kernel> map_kernel(const std::vector<std::string>& lines, bool with_exchange) {
    std::string script;
    for (const auto& l : lines) script += l + "\n";
    Config config;
    config.plugin_dirs = {KERNEX_PLUGIN_BUILD_DIR, KERNEX_KERNEL_TEST_PLUGIN_DIR};
    config.provider.name = "replay";
    config.provider.config = {{"script", dir.write("script.jsonl", script).string()}};
    config.data_dir = dir / "kdata";
    config.memory = PluginRef{"map", Json{{"audits_in_exchange", with_exchange}}};
    config.toolboxes = std::vector<PluginRef>{PluginRef{"builtin", Json::object()}};
    auto k = Kernel::create(std::move(config));
    EXPECT_TRUE(k) << k.error().describe();
    return k ? std::move(*k) : nullptr;
  }
  static std::vector<std::string> audit_reasons(Kernel& k) {
    std::vector<std::string> out;
    const auto rows = k.memory()->audit_log(MemoryScope::local(), 10).value();
    for (const auto& row : rows) {
      EXPECT_EQ(row.tool, "calculate");
      out.push_back(row.reason);
    }
    return out;
  }
  const std::string calc = tool_line("calculate", {{"expression", "6*7"}});
};

TEST_F(KernelAudit, RowsRideTheExchangeOfAStoreThatSavesThem) {
  auto k = map_kernel({calc, text_line("42")}, true);
  ASSERT_TRUE(k);
  auto r = k->run(Request::from_text("u", "what is 6*7"));
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(audit_reasons(*k), std::vector<std::string>{"save_exchange"});
}

TEST_F(KernelAudit, RowsAreRecordedOneByOneForAStoreThatDoesNot) {
  auto k = map_kernel({calc, text_line("42")}, false);
  ASSERT_TRUE(k);
  ASSERT_TRUE(k->run(Request::from_text("u", "what is 6*7")));
  EXPECT_EQ(audit_reasons(*k), std::vector<std::string>{"record_tool_call"});
}

TEST_F(KernelAudit, ARunThatFailsAfterItsToolStillAuditsIt) {
  auto k = map_kernel({calc, R"({"error": "the model went away"})"}, true);
  ASSERT_TRUE(k);
  auto r = k->run(Request::from_text("u", "what is 6*7"));
  ASSERT_FALSE(r);
  EXPECT_EQ(audit_reasons(*k), std::vector<std::string>{"record_tool_call"});
}

TEST_F(KernelAudit, ARunWhoseSaveIsRefusedStillAuditsIt) {
  auto k = map_kernel({calc, text_line("42")}, true);
  ASSERT_TRUE(k);
  RunOptions options;
  options.before_save = [] { return Result<void>(fail(ErrorCode::Cancelled, "not saved")); };
  ASSERT_FALSE(k->run(Request::from_text("u", "what is 6*7"), options));
  EXPECT_EQ(audit_reasons(*k), std::vector<std::string>{"record_tool_call"});
}

TEST_F(KernelRunOptions, ConversationKeyChoosesTheConversation) {
  auto k = kernel({text_line("a1"), text_line("a2"), text_line("a3")});
  RunOptions session;
  session.conversation = ConversationKey{"serve", "tenant-1:session-1", "acme"};
  auto first = k->run(Request::from_text("alice", "hello"), session);
  ASSERT_TRUE(first) << first.error().describe();
  // Another sender in the same session continues it: the key, not the sender, decides.
  auto second = k->run(Request::from_text("bob", "again"), session);
  ASSERT_TRUE(second) << second.error().describe();
  EXPECT_EQ(second->conversation_id, first->conversation_id);
  EXPECT_EQ(request(1)["messages"].size(), 3u);
  // Without a key alice's own conversation is a new one.
  auto own = k->run(Request::from_text("alice", "fresh"));
  ASSERT_TRUE(own);
  EXPECT_NE(own->conversation_id, first->conversation_id);
  EXPECT_EQ(request(2)["messages"].size(), 1u);

  auto listed = store()
                    ->list_conversations(kernex::MemoryScope::local(),
                                         ConversationFilter{std::string("serve"), std::nullopt, 10})
                    .value();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].key.sender_id, "tenant-1:session-1");
  EXPECT_EQ(listed[0].key.project, "acme");
  EXPECT_EQ(listed[0].message_count, 4u);
}

TEST_F(KernelRunOptions, HistoryIsTheWholeHistoryAndMemoryIsLeftAlone) {
  auto k = kernel({tool_line("calculate", {{"expression", "6*7"}}), text_line("42")});
  RunOptions options;
  options.history = std::vector<ContextEntry>{ContextEntry::user("earlier question"),
                                              ContextEntry::assistant("earlier answer")};
  options.conversation = ConversationKey{"serve", "ignored", ""};
  auto r = k->run(Request::from_text("u", "what is 6*7"), options);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->text, "42");
  EXPECT_EQ(r->conversation_id, "");
  const Json messages = request(0)["messages"];
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_EQ(messages[0]["content"], "earlier question");
  EXPECT_EQ(messages[1]["content"], "earlier answer");
  EXPECT_EQ(messages[2]["content"], "what is 6*7");

  auto s = store();
  EXPECT_TRUE(
      s->list_conversations(kernex::MemoryScope::local(), ConversationFilter{}).value().empty());
  EXPECT_TRUE(s->usage_by_day(kernex::MemoryScope::local()).value().empty());
  EXPECT_TRUE(s->audit_log(kernex::MemoryScope::local(), 10).value().empty());
}

TEST_F(KernelRunOptions, ExtraPromptFollowsTheKernelsAndTheRunsSources) {
  auto k = kernel({text_line("ok")}, /*memory=*/false);
  k->add_context_source(std::make_shared<PromptSource>("KERNEL SOURCE"));
  RunOptions options;
  options.sources = {std::make_shared<PromptSource>("RUN SOURCE")};
  options.extra_system_prompt = "EXTRA";
  ASSERT_TRUE(k->run(Request::from_text("u", "hi"), options));
  EXPECT_EQ(request(0)["system"], "BASE\n\nKERNEL SOURCE\n\nRUN SOURCE\n\nEXTRA");
}

TEST_F(KernelRunOptions, ExtraPromptAloneIsTheWholePrompt) {
  std::string script = text_line("ok") + "\n";
  Config config;
  config.provider.name = "replay";
  config.provider.config = {{"script", dir.write("script.jsonl", script).string()},
                            {"record", (dir / "record.jsonl").string()}};
  config.toolboxes = std::vector<PluginRef>{};
  config.pricing_file = std::filesystem::path(KERNEX_SOURCE_DIR) / "data/pricing.yaml";
  auto k = Kernel::create(std::move(config)).value();
  RunOptions options;
  options.extra_system_prompt = "EXTRA";
  ASSERT_TRUE(k->run(Request::from_text("u", "hi"), options));
  EXPECT_EQ(request(0)["system"], "EXTRA");
}

TEST_F(KernelRunOptions, RunSourcesOfferTheirContextTools) {
  auto k = kernel({tool_line("note", {{"text", "x"}}), text_line("done")}, /*memory=*/false);
  RunOptions options;
  options.sources = {std::make_shared<PromptSource>("NOTES", /*offer_note=*/true)};
  auto r = k->run(Request::from_text("u", "note it"), options);
  ASSERT_TRUE(r) << r.error().describe();
  ASSERT_EQ(r->tool_calls.size(), 1u);
  EXPECT_EQ(r->tool_calls[0].result.content, "noted");
  std::set<std::string> offered;
  const Json first_tools = request(0)["tools"];
  for (const auto& t : first_tools) offered.insert(t["name"].get<std::string>());
  EXPECT_TRUE(offered.contains("note"));
  // A run without the source is not offered the tool.
  std::set<std::string> later;
  std::filesystem::remove(dir / "record.jsonl");
  auto k2 = kernel({text_line("plain")}, false);
  ASSERT_TRUE(k2->run(Request::from_text("u", "hi")));
  const Json later_tools = request(0)["tools"];
  for (const auto& t : later_tools) later.insert(t["name"].get<std::string>());
  EXPECT_FALSE(later.contains("note"));
}

TEST_F(KernelRunOptions, WorkspaceAndStopReachTheTools) {
  Json two{{"tool_calls",
            {{{"id", "1"}, {"name", "where"}, {"arguments", Json::object()}},
             {{"id", "2"}, {"name", "stoppable"}, {"arguments", Json::object()}}}}};
  auto k = kernel({two.dump(), text_line("ok"), two.dump(), text_line("ok")}, false);
  std::stop_source source;
  RunOptions options;
  options.workspace = dir / "sessions" / "s1";
  options.stop = source.get_token();
  auto r = k->run(Request::from_text("u", "where am I"), options);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->tool_calls[0].result.content, (dir / "sessions" / "s1").string());
  EXPECT_EQ(r->tool_calls[1].result.content, "yes");
  auto plain = k->run(Request::from_text("u", "and now"));
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->tool_calls[0].result.content, "none");
  EXPECT_EQ(plain->tool_calls[1].result.content, "no");
}

TEST_F(KernelRunOptions, EightConcurrentRunsKeepTheirOwnConversations) {
  constexpr int kRuns = 8;
  std::vector<std::string> lines;
  for (int i = 0; i < kRuns; ++i) {
    const std::string q = "question " + std::to_string(i);
    std::string words;
    for (int w = 0; w <= i; ++w) words += "w ";
    lines.push_back(tool_line("word_count", {{"text", words}}, q));
    lines.push_back(text_line("answer " + std::to_string(i), q));
  }
  auto k = kernel(lines);
  std::vector<Result<RunResult>> results(kRuns, fail(ErrorCode::Internal, "not run"));
  std::latch start(kRuns);
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < kRuns; ++i) {
      threads.emplace_back([&, i] {
        start.arrive_and_wait();
        results[i] = k->run(
            Request::from_text("user-" + std::to_string(i), "question " + std::to_string(i)));
      });
    }
  }
  auto s = store();
  std::set<std::string> conversations;
  for (int i = 0; i < kRuns; ++i) {
    const auto& r = results[i];
    ASSERT_TRUE(r) << i << ": " << r.error().describe();
    EXPECT_EQ(r->text, "answer " + std::to_string(i));
    ASSERT_EQ(r->tool_calls.size(), 1u);
    EXPECT_EQ(Json::parse(r->tool_calls[0].result.content)["words"], i + 1);
    conversations.insert(r->conversation_id);
    auto messages =
        s->conversation_messages(kernex::MemoryScope::local(), r->conversation_id, 0, 10).value();
    ASSERT_EQ(messages.size(), 4u) << i;
    EXPECT_EQ(messages[0].entry.content, "question " + std::to_string(i));
    EXPECT_EQ(messages[1].entry.tool_calls.at(0).name, "word_count");
    EXPECT_TRUE(messages[2].entry.tool_result);
    EXPECT_EQ(messages[3].entry.content, "answer " + std::to_string(i));
  }
  EXPECT_EQ(conversations.size(), static_cast<std::size_t>(kRuns));
  EXPECT_EQ(s->audit_log(kernex::MemoryScope::local(), 100).value().size(),
            static_cast<std::size_t>(kRuns));
  std::uint64_t requests = 0;
  const auto days = s->usage_by_day(kernex::MemoryScope::local()).value();
  for (const auto& day : days) requests += day.requests;
  EXPECT_EQ(requests, static_cast<std::uint64_t>(kRuns));
}

TEST_F(KernelRunOptions, ConcurrentRunsNeverShareAProviderInstance) {
  constexpr int kRuns = 8;
  Config config;
  config.provider.name = "chunks";
  config.plugin_dirs = {KERNEX_KERNEL_TEST_PLUGIN_DIR};
  config.toolboxes = std::vector<PluginRef>{};
  config.pricing_file = std::filesystem::path(KERNEX_SOURCE_DIR) / "data/pricing.yaml";
  auto k = Kernel::create(std::move(config)).value();
  // Every run waits inside its provider call until all are inside theirs.
  std::latch inside(kRuns);
  std::vector<Result<RunResult>> results(kRuns, fail(ErrorCode::Internal, "not run"));
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < kRuns; ++i) {
      threads.emplace_back([&, i] {
        bool waited = false;
        RunOptions options;
        options.sink = [&](const StreamEvent& e) {
          if (e.kind != StreamEvent::Kind::TextDelta || waited) return;
          waited = true;
          inside.arrive_and_wait();
        };
        results[i] = k->run(Request::from_text("u" + std::to_string(i), "hi"), options);
      });
    }
  }
  for (const auto& r : results) {
    ASSERT_TRUE(r) << r.error().describe();
    EXPECT_EQ(r->text, "Hello world");
  }
}

}  // namespace
}  // namespace kernex
