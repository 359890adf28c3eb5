// The servers/ tree the REPL's kernel side generates from the tools offered to code: one module per
// tool with a typed signature and a docstring, importable and callable; hostile tool names and
// schemas never leave the tree nor break out of a string literal.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "kernex/json.hpp"
#include "servers_tree.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using kernex::Json;
using kernex::ToolSpec;
using ::testing::HasSubstr;

namespace {

// Runs python3 (outside any sandbox: the modules are only text here) with a stub kernex_tools
// that prints each call as JSON; returns what it printed.
std::string python(const fs::path& root, const std::string& code) {
  const std::string stub =
      "import json, sys, types\n"
      "m = types.ModuleType('kernex_tools')\n"
      "def call(name, /, **a):\n"
      "    print('CALL', json.dumps([name, a], sort_keys=True))\n"
      "    return 'ok'\n"
      "m.call = call\n"
      "sys.modules['kernex_tools'] = m\n"
      "sys.path.insert(0, " +
      Json(root.string()).dump() + ")\n";
  const fs::path script = root.parent_path() / "t.py";
  FILE* f = std::fopen(script.c_str(), "w");
  std::fputs((stub + code).c_str(), f);
  std::fclose(f);
  std::string out;
  FILE* p = ::popen(("python3 -I -B " + script.string() + " 2>&1").c_str(), "r");
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  ::pclose(p);
  return out;
}

TEST(ServersTree, ModulesAreTypedCallableAndDocumented) {
  kernex::testing::TempDir tmp;
  const std::vector<ToolSpec> tools = {
      {"filesystem__read_text_file",
       "Read a file as text.",
       Json{{"type", "object"},
            {"properties",
             {{"path", {{"type", "string"}}}, {"head", {{"type", "integer"}}}, {"bad-name", {}}}},
            {"required", {"path"}}},
       {}},
      {"read", "Read the contents of a file.", Json{{"type", "object"}}, {}},
  };
  const fs::path dir = tmp.path() / "v1";
  ASSERT_TRUE(kernex::repl::write_servers_tree(dir, tools));
  EXPECT_TRUE(fs::exists(dir / "servers/README.md"));
  // The README holds the REPL's API too (code mode's eval_code description points to it).
  std::ifstream readme(dir / "servers/README.md");
  const std::string text((std::istreambuf_iterator<char>(readme)), {});
  for (const char* api : {"tools.<name>(**args)", "search_tools(", "submit_result(value)",
                          "llm_query(", "save_skill(", "checkpoint()"})
    EXPECT_THAT(text, ::testing::HasSubstr(api));
  EXPECT_TRUE(fs::exists(dir / "servers/index.json"));
  const std::string out =
      python(dir,
             "import inspect, os\n"
             "import servers.filesystem.read_text_file as r\n"
             "print(inspect.signature(r.read_text_file))\n"
             "r(path='a.txt', head=3, **{'bad-name': 1})\n"
             "from servers.kernel import read\n"
             "read.read(file_path='x')\n"
             "print('Read a file as text.' in r.__doc__, sorted(os.listdir(os.path.join(" +
                 Json(dir.string()).dump() + ", 'servers'))))\n");
  EXPECT_THAT(out, HasSubstr("(*, head: int | None = None, path: str, **_kw: object) -> object"));
  EXPECT_THAT(
      out,
      HasSubstr(
          R"(CALL ["filesystem__read_text_file", {"bad-name": 1, "head": 3, "path": "a.txt"}])"));
  EXPECT_THAT(out, HasSubstr(R"(CALL ["read", {"file_path": "x"}])"));
  EXPECT_THAT(out,
              HasSubstr("True ['README.md', '__init__.py', 'filesystem', 'index.json', 'kernel']"));
}

TEST(ServersTree, HostileNamesStayInsideTheTreeAndInsideTheirLiterals) {
  kernex::testing::TempDir tmp;
  const std::string breakout = "x\"\"\"\nimport os; os.system('touch PWNED')\n\"\"\"";
  const std::vector<ToolSpec> tools = {
      {"../../evil__../../x", breakout, Json{{"type", "object"}}, {}},
      {"class",
       breakout,
       Json{{"type", "object"}, {"properties", {{"_call", {}}, {"import", {}}}}},
       {}},
      {"9lives", "", Json{{"type", "object"}}, {}},
      {"_call", "", Json::array(), {}},
      {"café", "", Json{{"type", "object"}}, {}},
      {"cafe_", "", Json{{"type", "object"}}, {}},
  };
  const fs::path dir = tmp.path() / "v1";
  ASSERT_TRUE(kernex::repl::write_servers_tree(dir, tools));
  for (const auto& e : fs::recursive_directory_iterator(tmp.path())) {
    const std::string rel = fs::relative(e.path(), tmp.path()).string();
    EXPECT_TRUE(rel.starts_with("v1")) << rel;
    EXPECT_EQ(rel.find(".."), std::string::npos) << rel;
  }
  EXPECT_EQ(kernex::repl::python_identifier("../x"), "___x");
  EXPECT_EQ(kernex::repl::python_identifier("class"), "_class");
  EXPECT_EQ(kernex::repl::python_identifier(""), "tool");
  const std::string out = python(dir,
                                 "import importlib, json\n"
                                 "for e in json.load(open(" +
                                     Json((dir / "servers/index.json").string()).dump() +
                                     ")):\n"
                                     "    m = importlib.import_module(e['module'])\n"
                                     "    m(**({'import': 1} if e['name'] == 'class' else {}))\n"
                                     "print('imported all')\n");
  EXPECT_THAT(out, HasSubstr("imported all")) << out;
  EXPECT_THAT(out, HasSubstr(R"(CALL ["class", {"import": 1}])"));
  EXPECT_THAT(out, HasSubstr(R"(CALL ["../../evil__../../x", {}])"));
  EXPECT_THAT(out, HasSubstr(R"(CALL ["caf\u00e9", {}])"));
  EXPECT_FALSE(fs::exists(tmp.path() / "PWNED"));
  EXPECT_FALSE(fs::exists("PWNED"));
}

}  // namespace
