// Topologies: the format (kernex's TOPOLOGY.toml and the YAML form, hostile files) and the runner
// on the real replay provider (artifacts, parallel groups, loops, map, handoff, retries, budgets,
// resume from the journal).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "kernex/kernel.hpp"
#include "kernex/topology/runner.hpp"
#include "kernex/topology/topology.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using kernex::Json;
using kernex::testing::read_lines;
using kernex::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;
namespace topo = kernex::topology;

namespace {

const fs::path kExamples = fs::path(KERNEX_SOURCE_DIR) / "examples/topologies";

// A topology folder: TOPOLOGY.toml and an .md for each agent named.
fs::path make_topology(const TempDir& dir, const std::string& toml,
                       const std::vector<std::string>& agents) {
  dir.write("t/TOPOLOGY.toml", toml);
  for (const auto& a : agents) dir.write("t/agents/" + a + ".md", "You are " + a + ".\n");
  return dir / "t";
}

std::string error_of(const kernex::Result<topo::Topology>& t) {
  return t ? std::string("(loaded)") : t.error().describe();
}

const char* kHeader = "[topology]\nname = \"t\"\ndescription = \"d\"\nversion = 1\n";

std::string phase(const std::string& name, const std::string& agent,
                  const std::string& extra = "") {
  return "\n[[phases]]\nname = \"" + name + "\"\nagent = \"" + agent + "\"\n" + extra;
}

TEST(TopologyFormat, LoadsKernexCodeReviewExample) {
  auto t = topo::load_dir(kExamples / "code-review");
  ASSERT_TRUE(t) << t.error().describe();
  EXPECT_EQ(t->name, "code-review");
  ASSERT_EQ(t->phases.size(), 4u);
  EXPECT_EQ(t->phases[0].type, topo::PhaseType::ParseBrief);
  EXPECT_EQ(t->phases[0].model_tier, "fast");
  EXPECT_EQ(t->phases[1].max_turns, 30u);
  EXPECT_EQ(t->phases[2].type, topo::PhaseType::CorrectiveLoop);
  EXPECT_EQ(t->phases[2].max_rounds, 3u);
  EXPECT_EQ(t->phases[2].fix_agent, "fixer");
  ASSERT_EQ(t->phases[2].pre_validation.size(), 1u);
  EXPECT_EQ(t->phases[2].pre_validation[0].paths, std::vector<std::string>{"review-output.md"});
  EXPECT_EQ(t->agents.size(), 4u);
  EXPECT_THAT(t->agents.at("fixer").prompt, HasSubstr("fix"));
  EXPECT_THAT(topo::describe(*t), HasSubstr("validate [corrective-loop] agent reviewer"));
}

TEST(TopologyFormat, YamlFormReadsTheSameSchema) {
  TempDir dir;
  dir.write("t/TOPOLOGY.yaml",
            "topology: {name: t, description: d, version: 1}\n"
            "agents:\n  a: {tools: [], workspace: read-only, limits: {max_turns: 3}}\n"
            "phases:\n"
            "  - {name: one, agent: a, parallel_group: g, inputs: [input]}\n"
            "  - {name: two, agent: b, parallel_group: g}\n"
            "  - name: three\n    agent: a\n    phase_type: corrective-loop\n"
            "    retry: {max: 2, fix_agent: b}\n    inputs: [one, two]\n");
  dir.write("t/agents/a.md", "A");
  dir.write("t/agents/b.md", "B");
  auto t = topo::load_dir(dir / "t");
  ASSERT_TRUE(t) << t.error().describe();
  EXPECT_EQ(t->groups().size(), 2u);
  EXPECT_EQ(t->agents.at("a").workspace, topo::WorkspaceView::ReadOnly);
  EXPECT_EQ(t->agents.at("a").limits.budgets.max_turns, 3u);
  EXPECT_EQ(t->phases[2].max_rounds, 2u);
  // A quoted version is a string in YAML as in TOML: an error.
  dir.write("t/TOPOLOGY.yaml", "topology: {name: t, description: d, version: \"1\"}\nphases: []\n");
  EXPECT_THAT(error_of(topo::load_dir(dir / "t")),
              HasSubstr("topology.version: expected an integer"));
}

struct Hostile {
  const char* what;
  std::string body;
  const char* error;
};

TEST(TopologyFormat, HostileFilesAreTypedErrorsNamingThePlace) {
  std::string ten_thousand = kHeader;
  for (int i = 0; i < 10000; ++i) ten_thousand += phase("p" + std::to_string(i), "a");
  const std::vector<Hostile> cases = {
      {"traversal in an agent name", kHeader + phase("p", "../../etc/passwd"),
       "phases[0].agent: \"../../etc/passwd\" is not a valid name"},
      {"a slash in a fix agent",
       kHeader +
           phase(
               "p", "a",
               "phase_type = \"corrective-loop\"\n[phases.retry]\nmax = 1\nfix_agent = \"x/y\"\n"),
       "phases[0].retry.fix_agent"},
      {"a cycle",
       kHeader + phase("p", "a", "inputs = [\"q\"]\n") + phase("q", "a", "inputs = [\"p\"]\n"),
       "cycle: phase 'p' needs 'q'"},
      {"a phase needing itself", kHeader + phase("p", "a", "inputs = [\"p\"]\n"), "cycle"},
      {"10 000 phases", ten_thousand, "10000 phases; a topology has at most 256"},
      {"a loop with no bound",
       kHeader +
           phase("p", "a", "phase_type = \"corrective-loop\"\n[phases.retry]\nfix_agent = \"a\"\n"),
       "needs [retry] with `max`"},
      {"a loop of a million rounds",
       kHeader + phase("p", "a",
                       "phase_type = \"corrective-loop\"\n[phases.retry]\nmax = 1000000\nfix_agent "
                       "= \"a\"\n"),
       "phases[0].retry.max: a loop runs 1 to 20 rounds"},
      {"an unknown key", kHeader + phase("p", "a", "agnet = \"b\"\n"),
       "phases[0].agnet: unknown key"},
      {"an unknown top-level key", std::string(kHeader) + "[surprise]\n" + phase("p", "a"),
       "surprise: unknown key"},
      {"a string version",
       "[topology]\nname = \"t\"\ndescription = \"d\"\nversion = \"1\"\n" + phase("p", "a"),
       "topology.version: expected an integer"},
      {"an unknown phase type", kHeader + phase("p", "a", "phase_type = \"forever\"\n"),
       "unknown phase_type"},
      {"an unknown artifact", kHeader + phase("p", "a", "inputs = [\"nothing\"]\n"),
       "unknown artifact 'nothing'"},
      {"a duplicate phase", kHeader + phase("p", "a") + phase("p", "a"), "duplicate phase 'p'"},
      {"an escaping output path",
       kHeader + phase("p", "a", "output_type = \"file\"\noutput_path = \"../x\"\n"),
       "phases[0].output_path"},
      {"an escaping validation path",
       kHeader + phase("p", "a", "post_validation = [\"/etc/passwd\"]\n"),
       "phases[0].post_validation[0]"},
      {"a bad topology name",
       "[topology]\nname = \"..\"\ndescription = \"d\"\nversion = 1\n" + phase("p", "a"),
       "topology.name"},
      {"no phases", kHeader, "[[phases]] are required"},
      {"an unmapped handoff", kHeader + phase("p", "a", "phase_type = \"handoff\"\n"),
       "needs `handoffs`"},
      {"a parallel group too big",
       [] {
         std::string s = kHeader;
         for (int i = 0; i < 40; ++i)
           s += phase("p" + std::to_string(i), "a", "parallel_group = \"g\"\n");
         return s;
       }(),
       "a parallel group runs at most 32"},
      {"not TOML", "[topology\nname = ", "invalid TOML"},
  };
  for (const auto& c : cases) {
    TempDir dir;
    auto t = topo::load_dir(make_topology(dir, c.body, {"a"}));
    EXPECT_THAT(error_of(t), HasSubstr(c.error)) << c.what;
    if (!t) {
      EXPECT_EQ(t.error().code, kernex::ErrorCode::Config) << c.what;
    }
  }
}

TEST(TopologyFormat, AgentFilesAreCheckedAndNeverFollowed) {
  TempDir dir;
  // An agent without its .md: the error names the phase field that named it.
  auto t = topo::load_dir(make_topology(dir, kHeader + phase("p", "ghost"), {}));
  EXPECT_THAT(error_of(t), HasSubstr("phases[0].agent"));
  EXPECT_THAT(error_of(t), HasSubstr("ghost"));
  // A symbolic link to a file outside the folder is refused.
  TempDir other;
  make_topology(other, kHeader + phase("p", "a"), {});
  fs::create_directories(other / "t/agents");
  fs::create_symlink("/etc/hostname", other / "t/agents/a.md");
  EXPECT_THAT(error_of(topo::load_dir(other / "t")), HasSubstr("symbolic link"));
  // A schema using $ref (unbounded recursion) or pattern (std::regex on model output) is refused.
  TempDir schema;
  schema.write("t/s.json", R"({"type": "object", "properties": {"a": {"$ref": "#"}}})");
  auto refused = topo::load_dir(make_topology(
      schema, kHeader + phase("p", "a", "output_type = \"json\"\noutput_schema = \"s.json\"\n"),
      {"a"}));
  EXPECT_THAT(error_of(refused), HasSubstr("`$ref` is not supported"));
}

TEST(TopologyFormat, NamesResolveUnderTheDataDirOnly) {
  TempDir dir;
  make_topology(dir, kHeader + phase("p", "a"), {"a"});
  fs::create_directories(dir / "data/topologies");
  fs::rename(dir / "t", dir / "data/topologies/t");
  auto t = topo::resolve("t", dir / "data");
  ASSERT_TRUE(t) << t.error().describe();
  EXPECT_EQ(t->dir, dir / "data/topologies/t");
  EXPECT_FALSE(topo::resolve("../t", dir / "data/topologies/t/agents"));
}

// ---- the runner ------------------------------------------------------------------------------

class TopologyRun : public ::testing::Test {
 protected:
  // A kernel on the replay provider playing `lines`, recording every request.
  std::unique_ptr<kernex::Kernel> kernel(const std::vector<std::string>& lines,
                                         const std::string& record = "record.jsonl") {
    std::string script;
    for (const auto& l : lines) script += l + "\n";
    kernex::Config config;
    config.data_dir = dir_ / "data";
    config.provider.name = "replay";
    config.provider.config = {{"script", dir_.write("script-" + record, script).string()},
                              {"record", (dir_ / record).string()}};
    config.toolboxes = std::vector<kernex::PluginRef>{};
    config.pricing_file = fs::path(KERNEX_SOURCE_DIR) / "data/pricing.yaml";
    auto k = kernex::Kernel::create(std::move(config));
    EXPECT_TRUE(k) << k.error().describe();
    return k ? std::move(*k) : nullptr;
  }
  std::vector<Json> requests(const std::string& record = "record.jsonl") {
    std::vector<Json> out;
    for (const auto& line : read_lines(dir_ / record)) out.push_back(Json::parse(line));
    return out;
  }
  static std::string message(const Json& request) {
    return request["messages"].back()["content"].get<std::string>();
  }
  topo::RunnerOptions options(const std::string& input, const std::string& run_id = "") {
    topo::RunnerOptions o;
    o.input = input;
    o.workspace = dir_ / "ws";
    fs::create_directories(o.workspace);
    o.run_id = run_id;
    return o;
  }
  TempDir dir_;
};

TEST_F(TopologyRun, AnalystSynthesizerSeesOnlyDeclaredInputs) {
  auto t = topo::load_dir(kExamples / "analyst-synthesizer");
  ASSERT_TRUE(t) << t.error().describe();
  auto k = kernel(read_lines(kExamples / "analyst-synthesizer/replay.jsonl"));
  auto r = topo::run(*k, *t, options("Speed up the indexer"));
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->outcome, "end_turn");
  EXPECT_EQ(r->artifacts["analysis"]["risk"], "low");
  EXPECT_EQ(r->text, "Cache the parsed index and batch the writes; the risk is low.");
  const auto reqs = requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_THAT(message(reqs[0]), HasSubstr("Speed up the indexer"));
  EXPECT_THAT(reqs[0]["system"].get<std::string>(), HasSubstr("You are the analyst"));
  // The synthesizer gets the analysis, not the run's input.
  EXPECT_THAT(message(reqs[1]), HasSubstr("cache the parsed index"));
  EXPECT_THAT(message(reqs[1]), Not(HasSubstr("Speed up the indexer")));
  EXPECT_EQ(r->per_agent["analyst"].input_tokens, 120u);
  EXPECT_EQ(r->per_agent["synthesizer"].output_tokens, 15u);
  EXPECT_EQ(r->usage.input_tokens, 210u);
}

TEST_F(TopologyRun, FanOutRunsTheGroupAndReducesIt) {
  auto t = topo::load_dir(kExamples / "review-fanout");
  ASSERT_TRUE(t) << t.error().describe();
  auto k = kernel(read_lines(kExamples / "review-fanout/replay.jsonl"));
  auto r = topo::run(*k, *t, options("diff --git a/x b/x"));
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->artifacts["security-review"]["findings"][0]["severity"], "high");
  EXPECT_EQ(r->artifacts["style-review"], Json::parse(R"({"findings": []})"));
  const auto reqs = requests();
  ASSERT_EQ(reqs.size(), 4u);
  EXPECT_THAT(message(reqs[3]), HasSubstr("the token is logged"));
  EXPECT_THAT(message(reqs[3]), HasSubstr("the loop reparses the file"));
  EXPECT_THAT(message(reqs[3]), Not(HasSubstr("diff --git")));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(reqs[i]["tools"].empty()) << "reviewers have no tools";
}

TEST_F(TopologyRun, BudgetExhaustedMidGroupStopsTheGroupAndKeepsWhatFinished) {
  TempDir tdir;
  auto t = topo::load_dir(make_topology(tdir,
                                        std::string(kHeader) + "[limits]\ntoken_budget = 1000\n" +
                                            phase("fast", "a", "parallel_group = \"g\"\n") +
                                            phase("slow1", "b", "parallel_group = \"g\"\n") +
                                            phase("slow2", "b", "parallel_group = \"g\"\n") +
                                            phase("after", "a", "inputs = [\"fast\"]\n"),
                                        {"a", "b"}));
  ASSERT_TRUE(t) << t.error().describe();
  auto k = kernel({R"({"match": "phase fast ·", "text": "done", "usage": {"input_tokens": 5000}})",
                   R"({"match": "phase slow1 ·", "text": "late", "delay_ms": 60000})",
                   R"({"match": "phase slow2 ·", "text": "late", "delay_ms": 60000})"});
  const auto start = std::chrono::steady_clock::now();
  auto r = topo::run(*k, *t, options("x", "budget-run"));
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_EQ(r->outcome, "budget_exhausted:tokens");
  EXPECT_EQ(r->artifacts["fast"], "done");
  EXPECT_FALSE(r->artifacts.contains("slow1"));
  ASSERT_EQ(r->phases.size(), 4u);
  EXPECT_EQ(r->phases[0].status, "done");
  EXPECT_EQ(r->phases[3].status, "not_run");
  const auto journal = Json::parse(
      kernex::testing::read_lines(dir_ / "data/topology-runs/budget-run/journal.json").at(0));
  EXPECT_TRUE(journal["steps"].contains("fast"));
  EXPECT_FALSE(journal["steps"].contains("slow1"));
}

TEST_F(TopologyRun, ResumeRunsNoFinishedPhaseAndHostileJournalsAreRefused) {
  TempDir tdir;
  auto t = topo::load_dir(make_topology(
      tdir, kHeader + phase("one", "a") + phase("two", "a", "inputs = [\"one\"]\n"), {"a"}));
  ASSERT_TRUE(t) << t.error().describe();
  {
    auto k = kernel({R"({"match": "phase one ·", "text": "first"})",
                     R"({"match": "phase two ·", "error": "the backend fell over"})"});
    auto r = topo::run(*k, *t, options("in", "resume-me"));
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error().describe(), HasSubstr("phase 'two'"));
  }
  auto k = kernel({R"({"match": "phase two ·", "text": "second"})"}, "record2.jsonl");
  auto r = topo::run(*k, *t, options("in", "resume-me"));
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->phases[0].status, "resumed");
  EXPECT_EQ(r->text, "second");
  const auto reqs = requests("record2.jsonl");
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_THAT(message(reqs[0]), HasSubstr("first"));  // phase one's output, from the journal
  // Another input, or a journal that is not one, is a typed error.
  EXPECT_EQ(topo::run(*k, *t, options("other", "resume-me")).error().code,
            kernex::ErrorCode::Usage);
  dir_.write("data/topology-runs/torn/journal.json", "{\"format\": 1, \"steps\": [");
  auto torn = topo::run(*k, *t, options("in", "torn"));
  ASSERT_FALSE(torn);
  EXPECT_EQ(torn.error().code, kernex::ErrorCode::Parse);
  EXPECT_EQ(topo::run(*k, *t, options("in", "../escape")).error().code, kernex::ErrorCode::Usage);
}

TEST_F(TopologyRun, RetriesWithBackoffThenChecksTheSchema) {
  TempDir tdir;
  tdir.write("t/s.json",
             R"({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}})");
  auto t = topo::load_dir(make_topology(
      tdir,
      kHeader +
          phase(
              "p", "a",
              "output_type = \"json\"\noutput_schema = \"s.json\"\nretries = 2\nbackoff_ms = 1\n"),
      {"a"}));
  ASSERT_TRUE(t) << t.error().describe();
  auto k = kernel({R"({"text": "no json here"})", R"({"text": "{\"n\": \"seven\"}"})",
                   R"({"text": "{\"n\": 7}"})"});
  auto r = topo::run(*k, *t, options("x"));
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->artifacts["p"]["n"], 7);
  EXPECT_EQ(requests().size(), 3u);
}

TEST_F(TopologyRun, CorrectiveLoopMapAndHandoff) {
  TempDir tdir;
  auto t = topo::load_dir(make_topology(
      tdir,
      kHeader + phase("list", "a", "output_type = \"json\"\n") +
          phase("each", "a", "phase_type = \"map\"\nmap_over = \"list\"\nconcurrency = 2\n") +
          phase("loop", "rev",
                "phase_type = \"corrective-loop\"\ninputs = [\"each\"]\n[phases.retry]\nmax = "
                "2\nfix_agent = \"fix\"\n") +
          phase("desk", "triage",
                "phase_type = \"handoff\"\nhandoffs = [\"billing\"]\ninputs = [\"input\"]\n"),
      {"a", "rev", "fix", "triage", "billing"}));
  ASSERT_TRUE(t) << t.error().describe();
  auto k = kernel({
      R"({"match": "phase list ·", "text": "[\"x\", \"y\", \"z\"]"})",
      R"({"match": "Item 1 of 3", "text": "X"})",
      R"({"match": "Item 2 of 3", "text": "Y"})",
      R"({"match": "Item 3 of 3", "text": "Z"})",
      R"({"match": "phase loop · agent rev]", "text": "{\"verdict\": \"fail\", \"why\": \"1\"}"})",
      R"({"match": "phase loop · agent fix]", "text": "fixed"})",
      R"({"match": "phase loop · agent rev]", "text": "{\"verdict\": \"pass\"}"})",
      R"({"match": "phase desk · agent triage]", "text": "{\"handoff\": \"billing\"}"})",
      R"j({"match": "handed to you (agent billing)", "text": "Refund issued."})j",
  });
  auto r = topo::run(*k, *t, options("I was charged twice"));
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->artifacts["each"], Json::parse(R"(["X", "Y", "Z"])"));
  EXPECT_EQ(r->artifacts["loop"]["verdict"], "pass");
  EXPECT_EQ(r->artifacts["desk"], "Refund issued.");
  const auto reqs = requests();
  ASSERT_EQ(reqs.size(), 9u);
  // The fixer is handed the reviewer's findings; billing gets triage's conversation.
  EXPECT_THAT(message(reqs[5]), HasSubstr("\"why\": \"1\""));
  const Json& billing = reqs[8]["messages"];
  ASSERT_EQ(billing.size(), 3u);
  EXPECT_THAT(billing[0]["content"].get<std::string>(), HasSubstr("I was charged twice"));
  EXPECT_THAT(billing[1]["content"].get<std::string>(), HasSubstr("handoff"));
}

TEST_F(TopologyRun, LoopThatNeverPassesEndsAtItsBound) {
  TempDir tdir;
  auto t = topo::load_dir(make_topology(
      tdir,
      kHeader +
          phase("loop", "rev",
                "phase_type = \"corrective-loop\"\n[phases.retry]\nmax = 1\nfix_agent = \"fix\"\n"),
      {"rev", "fix"}));
  ASSERT_TRUE(t) << t.error().describe();
  auto k = kernel({R"({"match": "agent rev]", "text": "{\"verdict\": \"fail\"}"})",
                   R"({"match": "agent fix]", "text": "tried"})",
                   R"({"match": "agent rev]", "text": "{\"verdict\": \"fail\"}"})"});
  auto r = topo::run(*k, *t, options("x"));
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().describe(), HasSubstr("after 1 fix round(s)"));
  EXPECT_EQ(requests().size(), 3u);
}

}  // namespace

namespace {

TEST_F(TopologyRun, TiersMapToModelsFromTheConfig) {
  kernex::Config config;
  config.sections["topology"] = Json::parse(R"({"tiers": {"fast": {"model": "small-1"}}})");
  auto tiers = topo::tiers_from_config(config);
  ASSERT_TRUE(tiers) << tiers.error().describe();
  config.sections["topology"] = Json::parse(R"({"tier": {}})");
  EXPECT_THAT(topo::tiers_from_config(config).error().describe(), HasSubstr("topology.tier"));
  TempDir tdir;
  auto t = topo::load_dir(make_topology(
      tdir, kHeader + phase("quick", "a", "model_tier = \"fast\"\n") + phase("deep", "a"), {"a"}));
  ASSERT_TRUE(t) << t.error().describe();
  auto k = kernel({R"({"text": "1"})", R"({"text": "2"})"});
  auto o = options("x");
  o.tiers = *tiers;
  auto r = topo::run(*k, *t, o);
  ASSERT_TRUE(r) << r.error().describe();
  const auto reqs = requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].value("model", ""), "small-1");
  EXPECT_NE(reqs[1].value("model", ""), "small-1");  // complex is not mapped: the default
}

}  // namespace
