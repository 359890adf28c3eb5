// `kernex topology`: the examples run offline on the replay provider (each phase's inputs and
// outputs checked), show and lint, and a run killed with SIGKILL in each kind of phase that,
// started again with its id, re-runs no finished step.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <thread>

#include "cli_runner.hpp"
#include "kernex/json.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using kernex::Json;
using kernex::testing::CliOutcome;
using kernex::testing::read_lines;
using kernex::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

const fs::path kExamples = fs::path(KERNEX_SOURCE_DIR) / "examples/topologies";

class CliTopology : public ::testing::Test {
 protected:
  CliTopology() {
    env_ = kernex::testing::clean_environment();
    env_.erase("KERNEX_DATA_DIR");
    env_["HOME"] = dir_.path().string();
    fs::create_directories(dir_ / "ws");
  }
  std::vector<std::string> run_args(const std::string& topology, const fs::path& script,
                                    const std::string& record, const std::string& input) {
    return {"topology",
            "run",
            topology,
            "--provider",
            "replay",
            "--provider-opt",
            "script=" + script.string(),
            "--provider-opt",
            "record=" + (dir_ / record).string(),
            "--data-dir",
            (dir_ / "data").string(),
            "--workspace",
            (dir_ / "ws").string(),
            "--input",
            Json(input).dump(),
            "--json"};
  }
  CliOutcome cli(const std::vector<std::string>& args) {
    return kernex::testing::run_cli(dir_.path(), env_, args);
  }
  std::vector<std::string> messages(const std::string& record) {
    std::vector<std::string> out;
    for (const auto& line : read_lines(dir_ / record))
      out.push_back(Json::parse(line)["messages"].back()["content"].get<std::string>());
    return out;
  }
  TempDir dir_;
  std::map<std::string, std::string> env_;
};

Json result_of(const CliOutcome& o) {
  EXPECT_EQ(o.exit_code, 0) << o.out << o.err;
  auto lines = o.out.empty() ? std::string("{}") : o.out.substr(0, o.out.find('\n'));
  return Json::parse(lines);
}

TEST_F(CliTopology, AnalystSynthesizerExample) {
  const auto ex = kExamples / "analyst-synthesizer";
  Json r = result_of(
      cli(run_args(ex.string(), ex / "replay.jsonl", "rec.jsonl", "Speed up the indexer")));
  EXPECT_EQ(r["outcome"], "end_turn");
  EXPECT_EQ(r["artifacts"]["analysis"]["points"][1], "batch the writes");
  EXPECT_EQ(r["text"], "Cache the parsed index and batch the writes; the risk is low.");
  const auto m = messages("rec.jsonl");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_THAT(m[0], HasSubstr("## Input `input` (text)\nSpeed up the indexer"));
  EXPECT_THAT(m[1], HasSubstr("## Input `analysis` (json)"));
  EXPECT_THAT(m[1], Not(HasSubstr("Speed up the indexer")));
  EXPECT_EQ(r["per_agent"]["analyst"]["input_tokens"], 120);
}

TEST_F(CliTopology, ReviewFanOutExample) {
  const auto ex = kExamples / "review-fanout";
  Json r =
      result_of(cli(run_args(ex.string(), ex / "replay.jsonl", "rec.jsonl", "diff --git a/x b/x")));
  EXPECT_EQ(r["artifacts"]["performance-review"]["findings"][0]["text"],
            "the loop reparses the file");
  EXPECT_EQ(r["text"], "1. high: the token is logged. 2. medium: the loop reparses the file.");
  const auto m = messages("rec.jsonl");
  ASSERT_EQ(m.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_THAT(m[i], HasSubstr("diff --git a/x b/x"));
  EXPECT_THAT(m[3], HasSubstr("## Input `style-review` (json)"));
  EXPECT_THAT(m[3], Not(HasSubstr("diff --git")));
}

TEST_F(CliTopology, CodeReviewExampleWritesThroughTheSandbox) {
  const auto ex = kExamples / "code-review";
  Json r =
      result_of(cli(run_args(ex.string(), ex / "replay.jsonl", "rec.jsonl", "Review src/size.py")));
  EXPECT_EQ(r["artifacts"]["validate"]["verdict"], "pass");
  EXPECT_EQ(r["text"],
            "One finding (negative sizes) was fixed in one round; the reviewer passes the change.");
  // The reviewer's write tool ran in the sandbox, in the run's workspace.
  EXPECT_EQ(kernex::testing::slurp(dir_ / "ws/review-output.md"),
            "- parse() accepts negative sizes\n");
  const auto m = messages("rec.jsonl");
  ASSERT_EQ(m.size(), 7u);
  EXPECT_THAT(m[1], HasSubstr("Plan: review parse()"));            // review gets the brief
  EXPECT_THAT(m[4], HasSubstr("parse() accepts negative sizes"));  // fixer gets the findings
  EXPECT_THAT(m[6], HasSubstr("\"verdict\": \"pass\""));           // summary gets the verdict
}

TEST_F(CliTopology, ShowAndLint) {
  auto shown = cli({"topology", "show", (kExamples / "review-fanout").string()});
  EXPECT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_THAT(shown.out, HasSubstr("parallel group 'reviews'"));
  EXPECT_THAT(shown.out, HasSubstr("reduce [standard] agent reducer"));
  dir_.write("bad/TOPOLOGY.toml",
             "[topology]\nname = \"bad\"\ndescription = \"d\"\nversion = 1\n"
             "[[phases]]\nname = \"p\"\nagent = \"../x\"\n");
  auto linted =
      cli({"topology", "lint", (kExamples / "code-review").string(), (dir_ / "bad").string()});
  EXPECT_EQ(linted.exit_code, 3);
  EXPECT_THAT(linted.out, HasSubstr("ok: code-review (4 phases, 4 agents)"));
  EXPECT_THAT(linted.err, HasSubstr("TOPOLOGY.toml:7: phases[0].agent"));
}

// ---- kill -9 and resume ----------------------------------------------------------------------

const char* kResumeTopology = R"(
[topology]
name = "kinds"
description = "one phase of each kind"
version = 1

[[phases]]
name = "first"
agent = "a"
output_type = "json"

[[phases]]
name = "ga"
agent = "a"
parallel_group = "g"

[[phases]]
name = "gb"
agent = "a"
parallel_group = "g"

[[phases]]
name = "each"
agent = "a"
phase_type = "map"
map_over = "first"
concurrency = 1

[[phases]]
name = "loop"
agent = "rev"
phase_type = "corrective-loop"
[phases.retry]
max = 2
fix_agent = "fix"

[[phases]]
name = "desk"
agent = "triage"
phase_type = "handoff"
handoffs = ["billing"]

[[phases]]
name = "last"
agent = "a"
inputs = ["desk", "each"]
)";

// Each line of the script, by the step it answers.
const std::vector<std::pair<std::string, std::string>> kLines = {
    {"first", R"("match": "phase first ·", "text": "[\"x\", \"y\", \"z\"]")"},
    {"ga", R"("match": "phase ga ·", "text": "A")"},
    {"gb", R"("match": "phase gb ·", "text": "B")"},
    {"item1", R"("match": "Item 1 of 3", "text": "X")"},
    {"item2", R"("match": "Item 2 of 3", "text": "Y")"},
    {"item3", R"("match": "Item 3 of 3", "text": "Z")"},
    {"review1", R"j("match": "Review (round 1)", "text": "{\"verdict\": \"fail\"}")j"},
    {"fix1", R"("match": "agent fix]", "text": "fixed")"},
    {"review2", R"j("match": "Review (round 2)", "text": "{\"verdict\": \"pass\"}")j"},
    {"triage", R"("match": "agent triage]", "text": "{\"handoff\": \"billing\"}")"},
    {"billing", R"j("match": "handed to you (agent billing)", "text": "refunded")j"},
    {"last", R"("match": "phase last ·", "text": "all done")"},
};

struct KillCase {
  const char* kind;
  const char* hang;                    // the line held back (the process is killed while it waits)
  const char* finished;                // a journal step that must be there before the kill
  std::vector<std::string> not_again;  // message parts the resumed run must never send
};

class CliTopologyKill : public CliTopology, public ::testing::WithParamInterface<KillCase> {
 protected:
  fs::path script(const std::string& name, const std::string& hang) {
    std::string text;
    for (const auto& [step, line] : kLines)
      text += "{" + line + (step == hang ? R"(, "delay_ms": 600000)" : "") + "}\n";
    return dir_.write(name, text);
  }
  // Whether the first process sent the request the line held back for `step` answers.
  bool asked(const std::string& step) {
    std::string match;
    for (const auto& [name, line] : kLines) {
      if (name == step) match = Json::parse("{" + line + "}")["match"].get<std::string>();
    }
    for (const auto& line : read_lines(dir_ / "rec1.jsonl")) {
      Json j = Json::parse(line, nullptr, false);
      if (j.is_object() &&
          j["messages"].back()["content"].get<std::string>().find(match) != std::string::npos)
        return true;
    }
    return false;
  }
  bool journal_has(const std::string& step) {
    const auto file = dir_ / "data/topology-runs/kill-run/journal.json";
    Json j = Json::parse(kernex::testing::slurp(file), nullptr, false);
    return j.is_object() && j.contains("steps") && j["steps"].contains(step);
  }
};

TEST_P(CliTopologyKill, ResumeRerunsNoFinishedStep) {
  const KillCase& c = GetParam();
  dir_.write("t/TOPOLOGY.toml", kResumeTopology);
  for (const char* a : {"a", "rev", "fix", "triage", "billing"})
    dir_.write(std::string("t/agents/") + a + ".md", std::string("You are ") + a + ".");
  auto args = run_args((dir_ / "t").string(), script("hang.jsonl", c.hang), "rec1.jsonl", "go");
  args.insert(args.end(), {"--run-id", "kill-run"});
  fs::create_directories(dir_ / "first");
  auto started = kernex::testing::start_program(KERNEX_CLI, dir_ / "first", env_, args);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  // Killed in the phase: after the step before it is journaled, while the held-back call waits.
  const auto in_phase = [&] { return journal_has(c.finished) && asked(c.hang); };
  while (!in_phase() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(in_phase()) << kernex::testing::slurp(started.err);
  ASSERT_EQ(::kill(started.pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(started.pid, &status, 0), started.pid);
  ASSERT_TRUE(WIFSIGNALED(status));

  auto resume = run_args((dir_ / "t").string(), script("all.jsonl", ""), "rec2.jsonl", "go");
  resume.insert(resume.end(), {"--run-id", "kill-run"});
  Json r = result_of(cli(resume));
  EXPECT_EQ(r["outcome"], "end_turn") << c.kind;
  EXPECT_EQ(r["text"], "all done");
  EXPECT_EQ(r["artifacts"]["each"], Json::parse(R"(["X", "Y", "Z"])"));
  EXPECT_EQ(r["artifacts"]["desk"], "refunded");
  const auto again = messages("rec2.jsonl");
  for (const auto& part : c.not_again) {
    for (const auto& m : again)
      EXPECT_THAT(m, Not(HasSubstr(part))) << c.kind << ": re-ran " << part;
  }
  // And every step the topology has was run exactly once over both processes.
  std::size_t total = messages("rec1.jsonl").size() + again.size();
  EXPECT_EQ(total, kLines.size() + 1) << c.kind << " (the held-back request is made twice)";
}

INSTANTIATE_TEST_SUITE_P(
    EveryPhaseKind, CliTopologyKill,
    ::testing::Values(
        KillCase{"standard",
                 "last",
                 "phase:desk",
                 {"phase first ·", "phase ga ·", "Item", "agent triage]"}},
        KillCase{"parallel", "gb", "ga", {"phase first ·", "phase ga ·"}},
        KillCase{"map", "item2", "each/item/0", {"phase first ·", "Item 1 of 3", "phase gb ·"}},
        KillCase{"loop", "fix1", "loop/review/0", {"Review (round 1)", "Item 3 of 3"}},
        KillCase{"handoff", "billing", "desk/hop/0", {"agent triage]", "Review (round 2)"}}),
    [](const auto& info) { return std::string(info.param.kind); });

}  // namespace
