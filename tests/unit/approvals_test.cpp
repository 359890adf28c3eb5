// Approvals and resumable runs through the real Kernel with the replay provider and the builtin
// toolbox: ask rules and hooks that ask, what the approver decides, and a journal that lets a
// run started again replay instead of repeating.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "kernex/kernel.hpp"
#include "replay_config.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

using ::testing::HasSubstr;
using testing::read_lines;
using testing::TempDir;

std::string tool_line(const std::string& id, const std::string& name, const Json& args) {
  return Json{{"tool_calls", {{{"id", id}, {"name", name}, {"arguments", args}}}}}.dump();
}
std::string two_calls_line() {
  return Json{{"tool_calls",
               {{{"id", "a"}, {"name", "calculate"}, {"arguments", {{"expression", "1+1"}}}},
                {{"id", "b"}, {"name", "calculate"}, {"arguments", {{"expression", "2+2"}}}}}}}
      .dump();
}
std::string text_line(const std::string& text) { return Json{{"text", text}}.dump(); }

// Answers from a script and records what it was asked.
struct ScriptedApprover {
  std::vector<ApprovalDecision> answers;
  std::vector<ApprovalRequest> asked;
  Approver approver() {
    return [this](const ApprovalRequest& request, std::stop_token) {
      asked.push_back(request);
      return asked.size() <= answers.size() ? answers[asked.size() - 1]
                                            : ApprovalDecision::deny("script ran out");
    };
  }
};

class AskingHook : public HookRunner {
 public:
  explicit AskingHook(HookOutcome outcome) : outcome_(std::move(outcome)) {}
  HookOutcome pre_tool(const HookScope&, ToolCall&) override {
    ++calls;
    return outcome_;
  }
  int calls = 0;

 private:
  HookOutcome outcome_;
};

// What a host stores for a run (serve keeps this in its database).
class MemoryJournal : public RunJournal {
 public:
  Result<std::optional<Response>> response(std::uint32_t turn) override {
    auto it = responses.find(turn);
    if (it == responses.end()) return std::optional<Response>{};
    return std::optional<Response>{it->second};
  }
  Result<void> record_response(std::uint32_t turn, const Response& r) override {
    responses[turn] = Json(r).get<Response>();  // through JSON, as a store would keep it
    return {};
  }
  Result<ToolEntry> tool(const std::string& key) override {
    auto it = tools.find(key);
    return it == tools.end() ? ToolEntry{} : it->second;
  }
  Result<void> tool_started(const std::string& key, const ToolCall&) override {
    tools[key].started = true;
    return {};
  }
  Result<void> tool_finished(const std::string& key, const ToolResult& result) override {
    tools[key].result = result;
    return {};
  }
  std::map<std::uint32_t, Response> responses;
  std::map<std::string, ToolEntry> tools;
};

class Approvals : public ::testing::Test {
 protected:
  Config config_for(const std::vector<std::string>& lines, std::vector<std::string> ask = {},
                    std::vector<std::string> deny = {}) {
    Config config = testing::replay_builtin_config(dir, lines);
    config.ask = std::move(ask);
    config.deny = std::move(deny);
    return config;
  }
  Result<RunResult> run(Config config, const RunOptions& options = {}) {
    KERNEX_ASSIGN_OR_RETURN(auto kernel, Kernel::create(std::move(config)));
    for (auto& h : hooks) kernel->add_hook(h);
    return kernel->run(Request::from_text("tester", "compute"), options);
  }
  std::size_t provider_requests() {
    return std::filesystem::exists(dir / "record.jsonl") ? read_lines(dir / "record.jsonl").size()
                                                         : 0;
  }

  TempDir dir;
  std::vector<std::shared_ptr<HookRunner>> hooks;
};

TEST(ApprovalRules, DenyComesFirstThenAskThenAllow) {
  PermissionRules rules({"calculate"}, {"calculate(*rm*)"}, {"calculate(*2*)", "word_count"});
  EXPECT_FALSE(rules.check("calculate", {{"expression", "rm 2"}}).ask);  // deny wins
  EXPECT_FALSE(rules.check("calculate", {{"expression", "rm 2"}}).allowed);
  PermissionOutcome ask = rules.check("calculate", {{"expression", "2+2"}});
  EXPECT_FALSE(ask.allowed);  // a host that cannot ask refuses it
  EXPECT_TRUE(ask.ask);
  EXPECT_EQ(ask.reason, "ask rule: calculate(*2*)");
  // Ask matches before the allow list is consulted: a person may approve what it lacks.
  EXPECT_TRUE(rules.check("word_count", {{"text", "x"}}).ask);
  EXPECT_TRUE(rules.check("calculate", {{"expression", "1+1"}}).allowed);
  // Approved arguments face deny and allow only.
  EXPECT_TRUE(rules.check_approved("calculate", {{"expression", "2+2"}}).allowed);
  EXPECT_FALSE(rules.check_approved("calculate", {{"expression", "rm"}}).allowed);
}

TEST(ApprovalRules, YamlFileTakesAnAskList) {
  auto rules = PermissionRules::parse_yaml("ask: [\"Bash(git push*)\"]\ndeny: []\n", "rules.yaml");
  ASSERT_TRUE(rules) << rules.error().describe();
  EXPECT_EQ(rules->ask(), std::vector<std::string>{"Bash(git push*)"});
  auto bad = PermissionRules::parse_yaml("ask: 3\n", "rules.yaml");
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message, HasSubstr("'ask' must be a list"));
  auto unknown = PermissionRules::parse_yaml("asks: []\n", "rules.yaml");
  ASSERT_FALSE(unknown);
  EXPECT_THAT(unknown.error().message, HasSubstr("expected 'allow', 'ask' or 'deny'"));
}

TEST(ApprovalVerdicts, RoundTripTheirNames) {
  for (auto v : {ApprovalVerdict::Approve, ApprovalVerdict::Deny, ApprovalVerdict::Always})
    EXPECT_EQ(parse_approval_verdict(to_string(v)), v);
  EXPECT_EQ(parse_approval_verdict("yes"), std::nullopt);
}

TEST_F(Approvals, WithoutAnApproverTheCallIsDeniedAsNeedingApproval) {
  auto r = run(config_for({tool_line("c1", "calculate", {{"expression", "6*7"}}), text_line("ok")},
                          {"calculate"}));
  ASSERT_TRUE(r) << r.error().describe();
  ASSERT_EQ(r->tool_calls.size(), 1u);
  EXPECT_TRUE(r->tool_calls[0].result.is_error);
  EXPECT_EQ(r->tool_calls[0].result.content,
            "Tool call denied: needs approval (ask rule: calculate)");
}

TEST_F(Approvals, ApprovedCallRunsAndTheRequestCarriesKeyAndReason) {
  ScriptedApprover person{{ApprovalDecision::approve()}, {}};
  RunOptions options;
  options.approver = person.approver();
  auto r = run(config_for({tool_line("c1", "calculate", {{"expression", "6*7"}}), text_line("ok")},
                          {"calculate(*7*)"}),
               options);
  ASSERT_TRUE(r) << r.error().describe();
  ASSERT_EQ(person.asked.size(), 1u);
  EXPECT_EQ(person.asked[0].key, "1.0");
  EXPECT_EQ(person.asked[0].reason, "ask rule: calculate(*7*)");
  EXPECT_EQ(person.asked[0].call.arguments["expression"], "6*7");
  EXPECT_FALSE(r->tool_calls[0].result.is_error);
  EXPECT_EQ(r->tool_calls[0].result.content, "42");
}

TEST_F(Approvals, DeniedCallTellsTheModelWhy) {
  ScriptedApprover person{{ApprovalDecision::deny("not on a Friday")}, {}};
  RunOptions options;
  options.approver = person.approver();
  auto r = run(config_for({tool_line("c1", "calculate", {{"expression", "6*7"}}), text_line("ok")},
                          {"calculate"}),
               options);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_TRUE(r->tool_calls[0].result.is_error);
  EXPECT_EQ(r->tool_calls[0].result.content,
            "Tool call denied: denied by a person: not on a Friday");
}

TEST_F(Approvals, AlwaysApprovesLaterCallsOfThatToolWithoutAsking) {
  ScriptedApprover person{{ApprovalDecision::always()}, {}};
  RunOptions options;
  options.approver = person.approver();
  auto r = run(config_for({two_calls_line(), text_line("ok")}, {"calculate"}), options);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(person.asked.size(), 1u);
  ASSERT_EQ(r->tool_calls.size(), 2u);
  EXPECT_EQ(r->tool_calls[0].result.content, "2");
  EXPECT_EQ(r->tool_calls[1].result.content, "4");
}

TEST_F(Approvals, EditedArgumentsRunAndAreCheckedAgainstTheRules) {
  ApprovalDecision edited = ApprovalDecision::approve();
  edited.arguments = Json{{"expression", "5*5"}};
  ApprovalDecision sneaky = ApprovalDecision::approve();
  sneaky.arguments = Json{{"expression", "9*9"}};
  ScriptedApprover person{{edited, sneaky}, {}};
  RunOptions options;
  options.approver = person.approver();
  auto r = run(config_for({two_calls_line(), text_line("ok")}, {"calculate"}, {"calculate(*9*)"}),
               options);
  ASSERT_TRUE(r) << r.error().describe();
  ASSERT_EQ(r->tool_calls.size(), 2u);
  EXPECT_EQ(r->tool_calls[0].result.content, "25");
  EXPECT_TRUE(r->tool_calls[1].result.is_error);
  EXPECT_EQ(r->tool_calls[1].result.content,
            "Tool call denied: denied by rule: calculate(*9*) (the edited arguments)");
}

TEST_F(Approvals, HookAskGoesToTheApproverAndABlockLaterInTheChainWins) {
  hooks.push_back(std::make_shared<AskingHook>(HookOutcome::ask("big numbers")));
  ScriptedApprover person{{ApprovalDecision::approve()}, {}};
  RunOptions options;
  options.approver = person.approver();
  auto r = run(config_for({tool_line("c1", "calculate", {{"expression", "6*7"}}), text_line("ok")}),
               options);
  ASSERT_TRUE(r) << r.error().describe();
  ASSERT_EQ(person.asked.size(), 1u);
  EXPECT_EQ(person.asked[0].reason, "big numbers");
  EXPECT_EQ(r->tool_calls[0].result.content, "42");

  hooks.push_back(std::make_shared<AskingHook>(HookOutcome::block("never")));
  ScriptedApprover nobody;
  options.approver = nobody.approver();
  r = run(config_for({tool_line("c1", "calculate", {{"expression", "6*7"}}), text_line("ok")}),
          options);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_TRUE(nobody.asked.empty());
  EXPECT_EQ(r->tool_calls[0].result.content, "Tool blocked by hook: never");
}

TEST_F(Approvals, ApproverThatThrowsDenies) {
  RunOptions options;
  options.approver = [](const ApprovalRequest&, std::stop_token) -> ApprovalDecision {
    throw std::runtime_error("socket closed");
  };
  auto r = run(config_for({tool_line("c1", "calculate", {{"expression", "6*7"}}), text_line("ok")},
                          {"calculate"}),
               options);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->tool_calls[0].result.content,
            "Tool call denied: denied by a person: the approver failed: socket closed");
}

TEST_F(Approvals, JournaledRunReplaysAnswersAndResultsWithoutRepeatingThem) {
  auto journal = std::make_shared<MemoryJournal>();
  RunOptions options;
  options.journal = journal;
  auto first = run(config_for({two_calls_line(), text_line("four and two")}), options);
  ASSERT_TRUE(first) << first.error().describe();
  EXPECT_EQ(journal->responses.size(), 2u);
  ASSERT_TRUE(journal->tools["1.0"].result);
  EXPECT_EQ(journal->tools["1.1"].result->content, "4");
  ASSERT_EQ(provider_requests(), 2u);

  // Started again with the same journal: no model call, no tool run (the hook sees nothing).
  auto counting = std::make_shared<AskingHook>(HookOutcome::allow());
  hooks.push_back(counting);
  std::filesystem::remove(dir / "record.jsonl");
  auto again = run(config_for({text_line("a different answer")}), options);
  ASSERT_TRUE(again) << again.error().describe();
  EXPECT_EQ(again->text, "four and two");
  EXPECT_EQ(provider_requests(), 0u);
  EXPECT_EQ(counting->calls, 0);
  ASSERT_EQ(again->tool_calls.size(), 2u);
  EXPECT_EQ(again->tool_calls[1].result.content, "4");
  EXPECT_EQ(again->tool_calls[1].result.call_id, "b");
}

TEST_F(Approvals, CallStartedButNeverFinishedIsReportedNotRunAgain) {
  auto journal = std::make_shared<MemoryJournal>();
  journal->record_response(1, Json::parse(two_calls_line()).get<Response>());
  journal->tools["1.0"].result = ToolResult{"a", "calculate", "2", false};
  journal->tools["1.1"].started = true;  // the process died while it ran
  RunOptions options;
  options.journal = journal;
  auto r = run(config_for({text_line("done")}), options);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(provider_requests(), 1u);  // only the answer after the tools
  ASSERT_EQ(r->tool_calls.size(), 2u);
  EXPECT_EQ(r->tool_calls[0].result.content, "2");
  EXPECT_TRUE(r->tool_calls[1].result.is_error);
  EXPECT_EQ(r->tool_calls[1].result.content, kInterruptedToolText);
  EXPECT_FALSE(journal->tools["1.1"].result);  // still unfinished: nothing ran
}

TEST_F(Approvals, ApprovalWaitingWhenTheProcessDiedIsAskedAgainWithTheSameKey) {
  auto journal = std::make_shared<MemoryJournal>();
  journal->record_response(1, Json::parse(two_calls_line()).get<Response>());
  journal->tools["1.0"].result = ToolResult{"a", "calculate", "2", false};
  ScriptedApprover person{{ApprovalDecision::approve()}, {}};
  RunOptions options;
  options.journal = journal;
  options.approver = person.approver();
  auto r = run(config_for({text_line("done")}, {"calculate(*2+2*)"}), options);
  ASSERT_TRUE(r) << r.error().describe();
  ASSERT_EQ(person.asked.size(), 1u);
  EXPECT_EQ(person.asked[0].key, "1.1");
  EXPECT_EQ(r->tool_calls[1].result.content, "4");
  EXPECT_TRUE(journal->tools["1.1"].result);
}

}  // namespace
}  // namespace kernex
