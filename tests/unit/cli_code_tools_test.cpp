// Tools called from code through the real CLI: code gets a tool's whole result (the built-in
// `read` of a 2.5 MB log, as {content, lines, truncated}) while the model gets only what the code
// prints; past the REPL's tool_result_max_bytes the call raises ToolError instead of cutting.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli_runner.hpp"
#include "kernex/json.hpp"
#include "replay_lines.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using kernex::Json;
using kernex::testing::slurp;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

class CliCodeTools : public ::testing::Test {
 protected:
  void SetUp() override {
    env_ = kernex::testing::clean_environment();
    env_.erase("KERNEX_DATA_DIR");
    fs::create_directories(tmp_.path() / "workspace");
    // 51 426 lines, every 9th an ERROR (5 714 of them): about 2.5 MB.
    std::ofstream log(tmp_.path() / "workspace/big.log");
    for (int i = 0; i < 51'426; ++i) {
      char line[64];
      std::snprintf(line, sizeof line, "10:%02d:%02d req=r%07d %s payload-%07d h%04d\n",
                    i / 60 % 60, i % 60, i, i % 9 == 0 ? "ERROR" : "INFO ", i, i % 10000);
      log << line;
    }
  }

  kernex::testing::CliOutcome run(const std::string& script, const std::string& repl_extra = "") {
    const fs::path dir = tmp_.path();
    std::ofstream(dir / "script.jsonl") << script;
    std::ofstream(dir / "kernex.yaml")
        << "provider: replay\n"
           "toolboxes:\n"
           "  - name: repl\n"
           "    options: {workspace: "
        << (dir / "workspace").string() << ", timeout: 60, offer: always" << repl_extra
        << "}\n"
           "  - name: files\n"
           "    options: {workspace: "
        << (dir / "workspace").string()
        << ", tools: [read]}\n"
           "limits:\n"
           "  max_turns: 4\n";
    return kernex::testing::run_cli(
        dir, env_,
        {"run", "--config", (dir / "kernex.yaml").string(), "--data-dir", (dir / "data").string(),
         "--provider-opt", "script=" + (dir / "script.jsonl").string(), "--provider-opt",
         "record=" + (dir / "requests.jsonl").string(), "--json",
         "Count the ERROR lines of big.log"});
  }

  // Runs `code` in one eval_code call answered "done"; the answer's `result`, or null (with
  // the failure recorded) when the run failed or gave no result object.
  Json code_result(const std::string& code) {
    auto r = run(kernex::testing::eval_code_line(code) + "\n" +
                 kernex::testing::answer_line("done") + "\n");
    EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
    const Json answer = Json::parse(r.out, nullptr, false);
    if (!answer.is_object() || !answer.contains("result") || !answer["result"].is_object()) {
      ADD_FAILURE() << "no result object: " << r.out;
      return Json();
    }
    return answer["result"];
  }

  kernex::testing::TempDir tmp_;
  std::map<std::string, std::string> env_;
};

TEST_F(CliCodeTools, CodeCountsEveryErrorLineOfABigReadAndTheModelNeverSeesTheFile) {
  ASSERT_GT(fs::file_size(tmp_.path() / "workspace/big.log"), 2'400'000u);
  const std::string code =
      "r = tools.read(file_path='big.log')\n"
      "n = sum(1 for l in r['content'].splitlines() if ' ERROR ' in l)\n"
      "submit_result({'errors': n, 'lines': r['lines'], 'truncated': r['truncated'],"
      " 'size': len(r['content'])})\n"
      "print('counted', n, 'ERROR lines')\n";
  auto r = run(kernex::testing::eval_code_line(code) + "\n" +
               kernex::testing::answer_line("5714 ERROR lines") + "\n");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const Json answer = Json::parse(r.out);
  EXPECT_EQ(answer["result"]["errors"], 5714) << answer.dump();
  EXPECT_EQ(answer["result"]["lines"], 51426);
  EXPECT_EQ(answer["result"]["truncated"], false);
  EXPECT_EQ(answer["result"]["size"], fs::file_size(tmp_.path() / "workspace/big.log"));

  // The model got the code's one line, never the file: no line of it is in any request.
  const std::string requests = slurp(tmp_.path() / "requests.jsonl");
  EXPECT_THAT(requests, HasSubstr("counted 5714 ERROR lines"));
  EXPECT_THAT(requests, Not(HasSubstr("payload-00")));
  EXPECT_LT(requests.size(), 20'000u);

  // The kernel's records of the call (memory.db's audit log, the trajectory) keep a bounded part
  // of the 2.5 MB result, not all of it: the code has the whole.
  std::uintmax_t recorded = 0;
  for (const auto& e : fs::recursive_directory_iterator(tmp_.path() / "data"))
    if (e.is_regular_file()) recorded += e.file_size();
  EXPECT_LT(recorded, 1'500'000u);
}

TEST_F(CliCodeTools, AResultPastTheCodeCapRaisesToolErrorAndIsNeverCut) {
  const std::string code =
      "try:\n"
      "    tools.read(file_path='big.log')\n"
      "    outcome = 'returned'\n"
      "except ToolError as e:\n"
      "    outcome = e.tool + ': ' + str(e)\n"
      "submit_result(outcome)\n";
  auto r = run(
      kernex::testing::eval_code_line(code) + "\n" + kernex::testing::answer_line("too big") + "\n",
      ", tool_result_max_bytes: 1000000");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const Json answer = Json::parse(r.out);
  ASSERT_TRUE(answer.contains("result") && answer["result"].is_string()) << r.out;
  const std::string outcome = answer["result"].get<std::string>();
  EXPECT_THAT(outcome, HasSubstr("read: "));
  EXPECT_THAT(outcome, HasSubstr("larger than 1000000 bytes (repl.tool_result_max_bytes)"));
  EXPECT_THAT(slurp(tmp_.path() / "requests.jsonl"), Not(HasSubstr("payload-00")));
}

// The servers/ tree: the run's tools as modules the kernel generated, importable, searchable and
// out of the code's reach for writing.
TEST_F(CliCodeTools, ServersTreeModulesImportSearchAndAreReadOnly) {
  const std::string code =
      "import os\n"
      "import servers.kernel.read as read\n"
      "r = read(file_path='big.log')\n"
      "try:\n"
      "    open(os.path.join(SERVERS_DIR, 'kernel', 'read.py'), 'a').write('x = 1')\n"
      "    w = 'writable'\n"
      "except OSError:\n"
      "    w = 'read-only'\n"
      "submit_result({'lines': r['lines'], 'found': search_tools('read a file', detail='name'),\n"
      "               'schema': search_tools('read', "
      "detail='schema')[0]['parameters']['required'],\n"
      "               'ls': sorted(os.listdir(SERVERS_DIR)), 'w': w,\n"
      "               'doc': 'Read the contents of a file.' in read.__doc__})\n";
  const Json result = code_result(code);
  ASSERT_TRUE(result.is_object());
  EXPECT_EQ(result["lines"], 51426) << result.dump();
  EXPECT_EQ(result["found"], Json::array({"servers.kernel.read"}));
  EXPECT_EQ(result["schema"], Json::array({"file_path"}));
  EXPECT_EQ(result["ls"], Json::array({"README.md", "__init__.py", "index.json", "kernel"}));
  EXPECT_EQ(result["w"], "read-only");
  EXPECT_EQ(result["doc"], true);
}

// servers/ relative to the working directory (the workspace), as the "code execution with MCP"
// layout has it: listed, read, globbed and walked there, never written, and nothing of it is put
// into the workspace itself. A workspace with a servers/ of its own keeps it.
TEST_F(CliCodeTools, ServersTreeIsReachableFromTheWorkingDirectoryAndReadOnly) {
  const std::string code =
      "import os, glob, pathlib\n"
      "out = {'ls': sorted(os.listdir('servers')), 'kernel': "
      "sorted(os.listdir('servers/kernel')),\n"
      "       'readme': open('servers/README.md').read().startswith('# servers/'),\n"
      "       'path': sorted(p.name for p in pathlib.Path('./servers/kernel').iterdir()),\n"
      "       'glob': glob.glob('servers/*/read.py'), 'isdir': os.path.isdir('servers'),\n"
      "       'walk': sorted(d for d, _, _ in os.walk('servers')),\n"
      "       'same': os.path.samefile('servers', os.path.dirname(SERVERS_DIR + '/x'))}\n"
      "for label, act in [('append', lambda: open('servers/kernel/read.py', 'a')),\n"
      "                   ('create', lambda: open('servers/new.py', 'w')),\n"
      "                   ('create_bytes', lambda: open(b'servers/kernel/new.py', 'wb')),\n"
      "                   ('os_open', lambda: os.open('servers/README.md', os.O_WRONLY)),\n"
      "                   ('remove', lambda: os.remove('servers/README.md')),\n"
      "                   ('mkdir', lambda: os.mkdir('servers/x'))]:\n"
      "    try:\n"
      "        act()\n"
      "        out[label] = 'done'\n"
      "    except OSError as e:\n"
      "        out[label] = type(e).__name__\n"
      "submit_result(out)\n";
  const Json result = code_result(code);
  ASSERT_TRUE(result.is_object());
  EXPECT_EQ(result["ls"], Json::array({"README.md", "__init__.py", "index.json", "kernel"}));
  EXPECT_EQ(result["kernel"], Json::array({"__init__.py", "read.py"}));
  EXPECT_EQ(result["path"], Json::array({"__init__.py", "read.py"}));
  EXPECT_EQ(result["readme"], true);
  EXPECT_EQ(result["glob"], Json::array({"servers/kernel/read.py"}));
  EXPECT_EQ(result["isdir"], true);
  EXPECT_EQ(result["walk"], Json::array({"servers", "servers/kernel"}));
  EXPECT_EQ(result["same"], true);
  for (const char* label : {"append", "create", "create_bytes", "os_open", "remove", "mkdir"})
    EXPECT_NE(result[label], "done") << label << ": " << result.dump();
  // The kernel put nothing into the workspace, and the code could not either.
  EXPECT_FALSE(fs::exists(tmp_.path() / "workspace/servers"));

  // A servers/ of the workspace's own comes first; the modules still import.
  fs::create_directories(tmp_.path() / "workspace/servers");
  std::ofstream(tmp_.path() / "workspace/servers/mine.txt") << "mine";
  auto own = run(kernex::testing::eval_code_line(
                     "import os\nimport servers.kernel.read as read\n"
                     "submit_result({'ls': os.listdir('servers'), 'doc': bool(read.__doc__)})\n") +
                 "\n" + kernex::testing::answer_line("done") + "\n");
  ASSERT_EQ(own.exit_code, 0) << own.err << own.out;
  const Json mine = Json::parse(own.out);
  EXPECT_EQ(mine["result"]["ls"], Json::array({"mine.txt"})) << own.out;
  EXPECT_EQ(mine["result"]["doc"], true);
}

}  // namespace
