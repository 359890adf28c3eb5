// Code that outlives its REPL, through the real CLI: save_skill() writes a skill folder into the
// tenant's saved-skills area in the data dir; it is not importable until a person runs
// `kernex skills trust`, and then a new run imports it as skills.<name>. Names, sizes and a
// symlink planted where the folder goes are refused. checkpoint() in one process is restore()d by
// another on the same conversation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli_runner.hpp"
#include "kernex/json.hpp"
#include "replay_lines.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using kernex::Json;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

class CliSavedSkills : public ::testing::Test {
 protected:
  void SetUp() override {
    env_ = kernex::testing::clean_environment();
    env_["KERNEX_DATA_DIR"] = data().string();
    fs::create_directories(tmp_.path() / "workspace");
    std::ofstream(tmp_.path() / "kernex.yaml") << "provider: replay\n"
                                                  "toolboxes:\n"
                                                  "  - name: repl\n"
                                                  "    options: {workspace: "
                                               << (tmp_.path() / "workspace").string()
                                               << ", timeout: 60, offer: always}\n"
                                                  "  - name: files\n"
                                                  "    options: {workspace: "
                                               << (tmp_.path() / "workspace").string()
                                               << ", tools: [read]}\n"
                                                  "limits:\n"
                                                  "  max_turns: 4\n";
  }

  fs::path data() const { return tmp_.path() / "data"; }
  fs::path area() const { return data() / "repl-skills" / "local"; }

  kernex::testing::CliOutcome cli(const std::vector<std::string>& args) {
    return kernex::testing::run_cli(tmp_.path(), env_, args);
  }

  // One `kernex run` whose model runs `code` once, then answers; returns the submitted result.
  Json run_code(const std::string& code) {
    std::ofstream(tmp_.path() / "script.jsonl") << kernex::testing::eval_code_line(code) << "\n"
                                                << kernex::testing::answer_line("done");
    auto r = cli({"run", "--config", (tmp_.path() / "kernex.yaml").string(), "--provider-opt",
                  "script=" + (tmp_.path() / "script.jsonl").string(), "--json", "go"});
    EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
    const Json answer = Json::parse(r.out, nullptr, false);
    EXPECT_TRUE(answer.is_object() && answer.contains("result")) << r.out << r.err;
    return answer.is_object() && answer.contains("result") ? answer["result"] : Json();
  }

  kernex::testing::TempDir tmp_;
  std::map<std::string, std::string> env_;
};

TEST_F(CliSavedSkills, ASavedSkillImportsOnlyOnceAPersonTrustedIt) {
  const Json saved = run_code(
      "r = save_skill('tally', 'def count(items, word):\\n"
      "    return sum(1 for i in items if word in i)\\n', 'Counts the items that hold a word.')\n"
      "try:\n"
      "    import skills.tally\n"
      "    r['same_run'] = 'imported'\n"
      "except ImportError as e:\n"
      "    r['same_run'] = str(e)\n"
      "submit_result(r)\n");
  ASSERT_TRUE(saved.is_object()) << saved.dump();
  const fs::path folder = area() / "tally";
  EXPECT_EQ(saved["folder"], folder.string());
  EXPECT_EQ(saved["trusted"], false);
  EXPECT_THAT(saved["same_run"].get<std::string>(), HasSubstr("kernex skills trust"));
  ASSERT_TRUE(fs::is_regular_file(folder / "SKILL.md"));
  ASSERT_TRUE(fs::is_regular_file(folder / "tally.py"));
  // The repo's own validator accepts the folder.
  auto lint = cli({"skills", "lint", "--spec", folder.string()});
  EXPECT_EQ(lint.exit_code, 0) << lint.out << lint.err;

  const std::string use =
      "try:\n"
      "    import skills.tally as t\n"
      "    submit_result({'count': t.count(['an apple', 'a pear', 'apples'], 'apple')})\n"
      "except ImportError as e:\n"
      "    submit_result({'error': str(e)})\n";
  const Json untrusted = run_code(use);
  ASSERT_TRUE(untrusted.contains("error")) << untrusted.dump();
  EXPECT_THAT(untrusted["error"].get<std::string>(),
              HasSubstr("kernex skills trust " + folder.string()));

  auto trust =
      cli({"skills", "trust", "--config", (tmp_.path() / "kernex.yaml").string(), folder.string()});
  ASSERT_EQ(trust.exit_code, 0) << trust.out << trust.err;
  EXPECT_EQ(run_code(use), Json({{"count", 2}}));

  // Saved again, it is another skill: untrusted until trusted again.
  run_code(
      "save_skill('tally', 'def count(items, word):\\n    return -1\\n', 'Changed.')\n"
      "submit_result(1)\n");
  EXPECT_TRUE(run_code(use).contains("error"));
}

// Trusted, a saved skill is also one of the run's skills: the model finds it in its catalog and
// activate_skill shows how code imports it. Untrusted (or changed since), it is not offered.
TEST_F(CliSavedSkills, ATrustedSavedSkillIsInTheModelsCatalog) {
  run_code(
      "save_skill('tally', 'def count(items, word):\\n"
      "    return sum(1 for i in items if word in i)\\n', 'Counts the items that hold a word.')\n"
      "submit_result(1)\n");
  const fs::path folder = area() / "tally";
  ASSERT_TRUE(fs::is_regular_file(folder / "SKILL.md"));
  const fs::path script = tmp_.path() / "activate.jsonl";
  std::ofstream(script)
      << Json{{"tool_calls",
               {{{"id", "a1"}, {"name", "activate_skill"}, {"arguments", {{"name", "tally"}}}}}}}
             .dump()
      << "\n"
      << kernex::testing::answer_line("done") << "\n";
  auto requests_of_a_run = [&](const std::string& name) {
    const fs::path record = tmp_.path() / (name + ".jsonl");
    auto r = cli({"run", "--config", (tmp_.path() / "kernex.yaml").string(), "--provider-opt",
                  "script=" + script.string(), "--provider-opt", "record=" + record.string(),
                  "--json", "go"});
    EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
    std::ifstream in(record);
    std::string first;
    std::getline(in, first);
    // The catalog: the first request's system prompt and tools (its messages hold the session's
    // earlier runs, the code that saved the skill among them).
    const Json request = Json::parse(first, nullptr, false);
    std::string catalog = request.is_object() ? request.value("system", Json("")).dump() : "";
    if (request.is_object() && request.contains("tools")) catalog += request["tools"].dump();
    std::string rest((std::istreambuf_iterator<char>(in)), {});
    return std::pair{catalog, rest};
  };
  const auto untrusted = requests_of_a_run("untrusted");
  EXPECT_THAT(untrusted.first, Not(HasSubstr("Counts the items that hold a word.")));
  EXPECT_THAT(untrusted.second, Not(HasSubstr("import skills.tally")));

  auto trust =
      cli({"skills", "trust", "--config", (tmp_.path() / "kernex.yaml").string(), folder.string()});
  ASSERT_EQ(trust.exit_code, 0) << trust.out << trust.err;
  const auto trusted = requests_of_a_run("trusted");
  EXPECT_THAT(trusted.first, HasSubstr("Counts the items that hold a word."));
  EXPECT_THAT(trusted.second, HasSubstr("import skills.tally"));

  // Changed since it was trusted (code saved it again): out of the catalog again.
  run_code(
      "save_skill('tally', 'X = 1', 'Counts the items that hold a word.')\nsubmit_result(1)\n");
  EXPECT_THAT(requests_of_a_run("changed").first,
              Not(HasSubstr("Counts the items that hold a word.")));
}

// `kernex mcp serve` (the CLI's tenant, "local"): code the client runs saves a skill; once
// trusted, the catalog of a kernex_run the client starts holds it, and before that it does not.
TEST_F(CliSavedSkills, McpServeRunsFindTrustedSavedSkillsInTheirCatalog) {
  const fs::path script = tmp_.path() / "mcp-script.jsonl";
  std::ofstream(script) << kernex::testing::answer_line("first") << "\n"
                        << kernex::testing::answer_line("second") << "\n";
  // One `kernex mcp serve` session: initialize, then each call; the provider's requests so far.
  int sessions = 0;
  auto mcp_serve = [&](const std::vector<Json>& calls) {
    const std::string n = std::to_string(++sessions);
    std::string in =
        Json{{"jsonrpc", "2.0"},
             {"id", 1},
             {"method", "initialize"},
             {"params", {{"protocolVersion", "2025-06-18"}, {"capabilities", Json::object()}}}}
            .dump() +
        "\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";
    int id = 2;
    for (const auto& c : calls)
      in += Json{{"jsonrpc", "2.0"}, {"id", id++}, {"method", "tools/call"}, {"params", c}}.dump() +
            "\n";
    const fs::path input = tmp_.path() / ("mcp-in-" + n + ".jsonl");
    std::ofstream(input) << in;
    const std::string cmd =
        "cd '" + tmp_.path().string() + "' && exec '" + KERNEX_CLI + "' mcp serve --config '" +
        (tmp_.path() / "kernex.yaml").string() + "' --provider-opt 'script=" + script.string() +
        "' --provider-opt 'record=" + (tmp_.path() / "mcp-record.jsonl").string() + "' < '" +
        input.string() + "'";
    auto r = kernex::testing::run_program("/bin/sh", tmp_.path(), env_, {"-c", cmd});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, Not(HasSubstr("\"isError\":true"))) << r.out << r.err;
    return kernex::testing::slurp(tmp_.path() / "mcp-record.jsonl");
  };
  auto run = [](const std::string& message) {
    return Json{{"name", "kernex_run"}, {"arguments", {{"message", message}}}};
  };
  const std::string save =
      "save_skill('tally', 'def count(items, word):\\n"
      "    return sum(1 for i in items if word in i)\\n', 'Counts the items that hold a word.')\n";
  const std::string before =
      mcp_serve({Json{{"name", "eval_code"}, {"arguments", {{"code", save}}}}, run("first")});
  const fs::path folder = area() / "tally";
  ASSERT_TRUE(fs::is_regular_file(folder / "SKILL.md"));
  EXPECT_THAT(before, Not(HasSubstr("Counts the items that hold a word.")));

  auto trust =
      cli({"skills", "trust", "--config", (tmp_.path() / "kernex.yaml").string(), folder.string()});
  ASSERT_EQ(trust.exit_code, 0) << trust.out << trust.err;
  const std::string after = mcp_serve({run("second")});
  EXPECT_THAT(after.substr(before.size()), HasSubstr("Counts the items that hold a word."));
}

TEST_F(CliSavedSkills, HostileNamesSizesAndAPlantedSymlinkAreRefused) {
  fs::create_directories(area());
  fs::create_directories(tmp_.path() / "outside");
  fs::create_directory_symlink(tmp_.path() / "outside", area() / "planted");
  const Json r = run_code(
      "out = {}\n"
      "for label, name, code, desc in [\n"
      "        ('dotdot', '../x', 'x = 1', 'd'), ('slash', 'a/b', 'x = 1', 'd'),\n"
      "        ('keyword', 'class', 'x = 1', 'd'), ('upper', 'Tally', 'x = 1', 'd'),\n"
      "        ('long', 'a' * 65, 'x = 1', 'd'), ('hyphen', 'my-skill', 'x = 1', 'd'),\n"
      "        ('huge', 'huge', '#' * (2 << 20), 'd'), ('lines', 'lines', 'x = 1', 'a\\nb'),\n"
      "        ('nodesc', 'nodesc', 'x = 1', ''), ('planted', 'planted', 'x = 1', 'd')]:\n"
      "    try:\n"
      "        save_skill(name, code, desc)\n"
      "        out[label] = 'saved'\n"
      "    except ValueError as e:\n"
      "        out[label] = str(e)\n"
      "submit_result(out)\n");
  ASSERT_TRUE(r.is_object()) << r.dump();
  for (const char* label : {"dotdot", "slash", "keyword", "upper", "long", "hyphen", "huge",
                            "lines", "nodesc", "planted"}) {
    EXPECT_NE(r[label], "saved") << label;
    EXPECT_THAT(r[label].get<std::string>(), HasSubstr("save_skill")) << label;
  }
  EXPECT_THAT(r["keyword"].get<std::string>(), HasSubstr("Python keyword"));
  EXPECT_THAT(r["huge"].get<std::string>(), HasSubstr("1 MiB"));
  EXPECT_THAT(r["planted"].get<std::string>(), HasSubstr("symbolic link"));
  EXPECT_TRUE(fs::is_empty(tmp_.path() / "outside"));
  EXPECT_TRUE(fs::is_symlink(area() / "planted"));
  EXPECT_FALSE(fs::exists(data() / "repl-skills" / "x"));
  // Nothing but the planted link is left in the area (no scratch folders).
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(area())) ++entries;
  EXPECT_EQ(entries, 1u);
}

// A symlink planted higher up (the area itself, the checkpoints' directory) is refused too.
TEST_F(CliSavedSkills, SymlinkedAreasAreNeverWrittenThrough) {
  fs::create_directories(data());
  fs::create_directories(tmp_.path() / "outside");
  fs::create_directory_symlink(tmp_.path() / "outside", data() / "repl-skills");
  fs::create_directory_symlink(tmp_.path() / "outside", data() / "repl-checkpoints");
  const Json r = run_code(
      "out = {}\n"
      "try:\n"
      "    save_skill('tally', 'X = 1', 'Holds one.')\n"
      "    out['save'] = 'saved'\n"
      "except ValueError as e:\n"
      "    out['save'] = str(e)\n"
      "v = 1\n"
      "try:\n"
      "    checkpoint('v')\n"
      "    out['checkpoint'] = 'kept'\n"
      "except RuntimeError as e:\n"
      "    out['checkpoint'] = str(e)\n"
      "submit_result(out)\n");
  ASSERT_TRUE(r.is_object()) << r.dump();
  EXPECT_THAT(r["save"].get<std::string>(), HasSubstr("symbolic link"));
  EXPECT_THAT(r["checkpoint"].get<std::string>(), HasSubstr("symbolic link"));
  EXPECT_TRUE(fs::is_empty(tmp_.path() / "outside"));
}

TEST_F(CliSavedSkills, ACheckpointIsRestoredByANewProcessOnTheSameConversation) {
  const Json saved = run_code(
      "totals = {'errors': 5714, 'files': ['a.log', 'b.log']}\n"
      "def helper(): pass\n"
      "submit_result(checkpoint('totals'))\n");
  EXPECT_EQ(saved["saved"], Json::array({"totals"}));
  EXPECT_EQ(saved["persisted"], true);
  const Json restored =
      run_code("names = restore()\nsubmit_result({'names': names, 'totals': totals})\n");
  EXPECT_EQ(restored["names"], Json::array({"totals"}));
  EXPECT_EQ(restored["totals"]["errors"], 5714);

  // The file is the kernel's, but read as hostile: one grown past the cap is refused, not loaded.
  fs::path file;
  for (const auto& e : fs::recursive_directory_iterator(data() / "repl-checkpoints"))
    if (e.is_regular_file()) file = e.path();
  ASSERT_FALSE(file.empty());
  fs::resize_file(file, (64u << 20) + 1);
  const Json refused = run_code(
      "try:\n"
      "    restore()\n"
      "    submit_result('restored')\n"
      "except RuntimeError as e:\n"
      "    submit_result(str(e))\n");
  EXPECT_THAT(refused.get<std::string>(), HasSubstr("restore"));
  EXPECT_NE(refused, "restored");
}

}  // namespace
