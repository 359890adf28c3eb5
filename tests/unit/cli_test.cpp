// Runs bin/kernex as a user would and checks exit codes, stderr messages and JSON output.
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "exit_codes.hpp"
#include "cli_runner.hpp"
#include "kernex/json.hpp"
#include "provider_opt.hpp"

namespace fs = std::filesystem;
using kernex::Json;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

using Outcome = kernex::testing::CliOutcome;
using kernex::testing::slurp;

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "kernex-cli-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    // A clean, known environment: no config from the caller's shell.
    env_ = kernex::testing::clean_environment();
    env_["KERNEX_DATA_DIR"] = (dir_ / "data").string();
    env_["KERNEX_PLUGIN_PATH"] = (dir_ / "no-plugins").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  Outcome kernex(const std::vector<std::string>& args) {
    return kernex::testing::run_cli(dir_, env_, args);
  }

  fs::path write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p;
  }

  fs::path dir_;
  std::map<std::string, std::string> env_;
};

TEST_F(Cli, HelpExitsZeroAndDocumentsExitCodes) {
  auto o = kernex({"--help"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_THAT(o.out, HasSubstr("run"));
  EXPECT_THAT(o.out, HasSubstr("plugins"));
  EXPECT_THAT(o.out, HasSubstr("doctor"));
  EXPECT_THAT(o.out, HasSubstr("Exit codes: 0 ok"));
  for (const char* sub : {"run", "plugins", "doctor"}) {
    auto s = kernex({sub, "--help"});
    EXPECT_EQ(s.exit_code, 0) << sub << ": " << s.err;
    EXPECT_THAT(s.out, HasSubstr("--config")) << sub;
    EXPECT_THAT(s.out, HasSubstr("Exit codes")) << sub;
  }
}

TEST_F(Cli, VersionExitsZero) {
  auto o = kernex({"--version"});
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_THAT(o.out, HasSubstr("kernex "));
}

TEST_F(Cli, UsageErrorsExitTwo) {
  auto unknown = kernex({"run", "--no-such-option", "hi"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("kernex: usage: "));
  EXPECT_THAT(unknown.err, HasSubstr("--no-such-option"));

  EXPECT_EQ(kernex({}).exit_code, 2);              // no subcommand
  EXPECT_EQ(kernex({"frobnicate"}).exit_code, 2);  // unknown subcommand
  EXPECT_EQ(kernex({"run"}).exit_code, 2);         // no message
  EXPECT_EQ(kernex({"run", "--max-turns", "ten", "hi"}).exit_code, 2);
  EXPECT_EQ(kernex({"run", "--max-turns", "-1", "hi"}).exit_code, 2);
  EXPECT_EQ(kernex({"run", "--cost-budget", "-0.5", "hi"}).exit_code, 2);

  auto opt = kernex({"run", "--provider", "replay", "--provider-opt", "no-equals-sign", "hi"});
  EXPECT_EQ(opt.exit_code, 2);
  EXPECT_THAT(opt.err, HasSubstr("kernex: usage: --provider-opt expects KEY=VALUE"));
}

// A mistyped command is named with the nearest one; options with values before it are skipped.
TEST_F(Cli, MistypedSubcommandsSuggestTheNearest) {
  auto rnu = kernex({"rnu", "hello"});
  EXPECT_EQ(rnu.exit_code, 2);
  EXPECT_THAT(rnu.err, HasSubstr("unknown command 'rnu'; did you mean 'run'?"));
  auto config = kernex({"--config", "k.yaml", "memroy"});
  EXPECT_EQ(config.exit_code, 2);
  EXPECT_THAT(config.err, HasSubstr("did you mean 'memory'?"));
  auto nested = kernex({"memory", "facst"});
  EXPECT_EQ(nested.exit_code, 2);
  EXPECT_THAT(nested.err, HasSubstr("unknown command 'facst'; did you mean 'facts'?"));
  auto far = kernex({"frobnicate"});
  EXPECT_EQ(far.exit_code, 2);
  EXPECT_THAT(far.err, HasSubstr("unknown command 'frobnicate'; the commands are: run"));
  EXPECT_THAT(far.err, Not(HasSubstr("did you mean")));
}

// Numeric flags: finite and in range or a usage error naming the flag (a NaN --cost-budget
// passed CLI11's NonNegativeNumber and switched the budget off).
TEST_F(Cli, NumericFlagsOutOfRangeAreUsageErrorsNamingTheFlag) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--cost-budget", "nan"}, {"--cost-budget", "inf"},      {"--cost-budget", "1e999"},
      {"--cost-budget", "-1"},  {"--cost-budget", "2e9"},      {"--max-turns", "2.5"},
      {"--max-turns", "-1"},    {"--max-turns", "4294967296"}, {"--token-budget", "1e3"},
      {"--tool-budget", "nan"},
  };
  for (const auto& [flag, value] : bad) {
    auto o = kernex({"run", "--provider", "replay", flag, value, "hi"});
    EXPECT_EQ(o.exit_code, 2) << flag << " " << value << ": " << o.err;
    EXPECT_NE(o.err.find(flag), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("expected"), std::string::npos) << o.err;
  }
  auto nan = kernex({"run", "--provider", "replay", "--cost-budget", "nan", "hi"});
  EXPECT_NE(nan.err.find("expected a number in [0, 1e+09], got nan"), std::string::npos) << nan.err;
  auto timeout = kernex({"sandbox", "exec", "--timeout", "nan", "--", "true"});
  EXPECT_EQ(timeout.exit_code, 2) << timeout.err;
  EXPECT_NE(timeout.err.find("--timeout"), std::string::npos) << timeout.err;
  auto port = kernex({"sandbox", "exec", "--allow-net", "70000", "--", "true"});
  EXPECT_EQ(port.exit_code, 2) << port.err;
  // A provider option: a Config error naming it, from --provider-opt too.
  auto opt =
      kernex({"run", "--provider", "openai", "--provider-opt", "base_url=http://127.0.0.1:9/v1",
              "--provider-opt", "timeout_secs=1e300", "hi"});
  EXPECT_EQ(opt.exit_code, 4) << opt.err;  // the plugin could not be created
  EXPECT_NE(opt.err.find("timeout_secs"), std::string::npos) << opt.err;
}

// JSON the CLI is handed (tool arguments, a memory export) is untrusted: nested a million
// deep it is refused with an error instead of overflowing the stack later, when it is copied or
// printed.
TEST_F(Cli, DeeplyNestedJsonInputsAreRefusedNotCrashed) {
  // 120 KB: one argv string may not pass 128 KiB (MAX_ARG_STRLEN).
  const std::string deep = std::string(60'000, '[') + std::string(60'000, ']');
  auto tool = kernex({"tool", "run", "--skills", dir_.string(), "--tool", "echo", "--args", deep});
  EXPECT_EQ(tool.exit_code, 2) << tool.err.substr(0, 300);
  EXPECT_THAT(tool.err, HasSubstr("--args"));
  auto mcp = kernex({"mcp", "call", "srv", "tool", deep});
  EXPECT_NE(mcp.exit_code, 0);
  EXPECT_LT(mcp.exit_code, 128) << "killed by a signal";
  const std::string deeper = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  const auto file = write("export.json", "{\"messages\":" + deeper + "}");
  auto import = kernex({"memory", "import", file.string()});
  EXPECT_NE(import.exit_code, 0);
  EXPECT_LT(import.exit_code, 128) << "killed by a signal";
  EXPECT_THAT(import.err, HasSubstr("not valid JSON"));
}

TEST_F(Cli, RunWithoutProviderIsAConfigError) {
  auto o = kernex({"run", "hello"});
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_THAT(o.err, HasSubstr("kernex: config: no provider configured"));
  EXPECT_THAT(o.err, HasSubstr("--provider"));
  EXPECT_TRUE(o.out.empty());
}

TEST_F(Cli, BadConfigFileExitsThreeNamingTheKey) {
  fs::path bad = write("kernex.yaml", "provider: replay\nlimits:\n  max_turns: ten\n");
  const std::string expected =
      bad.string() + ":3: limits.max_turns: expected a non-negative integer, got \"ten\"";

  auto on_run = kernex({"run", "--config", bad.string(), "hello"});
  EXPECT_EQ(on_run.exit_code, 3);
  EXPECT_THAT(on_run.err, HasSubstr("kernex: config: " + expected));

  auto global = kernex({"--config", bad.string(), "run", "hello"});  // before the subcommand too
  EXPECT_EQ(global.exit_code, 3);
  EXPECT_THAT(global.err, HasSubstr(expected));

  auto plugins = kernex({"plugins", "--config", bad.string()});
  EXPECT_EQ(plugins.exit_code, 3);
  EXPECT_THAT(plugins.err, HasSubstr(expected));

  fs::path unknown = write("unknown.yaml", "provider: replay\nlimts: {}\n");
  auto u = kernex({"run", "--config", unknown.string(), "hello"});
  EXPECT_EQ(u.exit_code, 3);
  EXPECT_THAT(u.err, HasSubstr(":2: limts: unknown key"));
}

TEST_F(Cli, MissingConfigFilesExitThree) {
  auto named = kernex({"run", "--config", (dir_ / "nope.yaml").string(), "hello"});
  EXPECT_EQ(named.exit_code, 3);
  EXPECT_THAT(named.err, HasSubstr("nope.yaml"));

  env_["KERNEX_CONFIG"] = (dir_ / "env-nope.yaml").string();
  auto from_env = kernex({"run", "--provider", "replay", "hello"});
  EXPECT_EQ(from_env.exit_code, 3);
  EXPECT_THAT(from_env.err, HasSubstr("KERNEX_CONFIG"));
}

TEST_F(Cli, PluginsJsonIsAnArrayOfPluginObjects) {
  fs::create_directories(dir_ / "plugins");
  // Not a plugin: discovery must report it as a failure, not crash.
  write("plugins/libkernex-bogus.so", "this is not an ELF file");
  fs::path cfg = write("kernex.yaml", "plugin_dirs: [plugins]\n");
  auto o = kernex({"plugins", "--json", "--config", cfg.string()});
  EXPECT_TRUE(o.exit_code == 0 || o.exit_code == 4) << o.exit_code << o.err;
  Json j = Json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  ASSERT_TRUE(j.is_array());
  bool saw_bogus = false;
  for (const auto& p : j) {
    for (const char* key : {"path", "kind", "name", "version", "abi_version", "ok", "error"})
      EXPECT_TRUE(p.contains(key)) << key << " in " << p.dump();
    if (p.at("path").get<std::string>().ends_with("libkernex-bogus.so")) {
      saw_bogus = true;
      EXPECT_FALSE(p.at("ok").get<bool>());
      EXPECT_TRUE(p.at("error").is_string());
    }
  }
  EXPECT_TRUE(saw_bogus) << o.out;
  EXPECT_EQ(o.exit_code, 4);  // a file failed to load

  auto text = kernex({"plugins", "--config", cfg.string()});
  EXPECT_EQ(text.exit_code, 4);
  EXPECT_THAT(text.out,
              HasSubstr("ERROR " + (dir_ / "plugins" / "libkernex-bogus.so").string() + ": "));
}

TEST_F(Cli, DoctorJsonIsAValidReport) {
  auto o = kernex({"doctor", "--json"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  Json j = Json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  ASSERT_TRUE(j.is_object());
  EXPECT_TRUE(j.at("landlock").at("available").get<bool>());
  EXPECT_GE(j.at("landlock").at("abi").get<int>(), 1);
  EXPECT_TRUE(j.at("seccomp").at("available").get<bool>());
  EXPECT_EQ(j.at("data_dir").at("path"), (dir_ / "data").string());
  EXPECT_TRUE(j.at("missing").is_array());
  EXPECT_TRUE(j.at("ok").is_boolean());

  auto text = kernex({"doctor"});
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_THAT(text.out, HasSubstr("landlock"));
}

TEST_F(Cli, DoctorReportsABadConfigAndStillRuns) {
  fs::path bad = write("kernex.yaml", "hooks: audit\n");
  auto o = kernex({"--config", bad.string(), "doctor", "--json"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  Json j = Json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  EXPECT_THAT(j.at("config").at("error").get<std::string>(),
              HasSubstr("hooks: expected a list of plugins"));
  EXPECT_FALSE(j.at("ok").get<bool>());
}

TEST(CliExitCodes, EveryErrorCodeMapsToADocumentedCode) {
  using kernex::ErrorCode;
  using kernex::cli::exit_code;
  EXPECT_EQ(exit_code(ErrorCode::Internal), 1);
  EXPECT_EQ(exit_code(ErrorCode::Io), 1);
  EXPECT_EQ(exit_code(ErrorCode::Parse), 1);
  EXPECT_EQ(exit_code(ErrorCode::Unsupported), 1);
  EXPECT_EQ(exit_code(ErrorCode::Usage), 2);
  EXPECT_EQ(exit_code(ErrorCode::Config), 3);
  EXPECT_EQ(exit_code(ErrorCode::Skill), 3);
  EXPECT_EQ(exit_code(ErrorCode::Plugin), 4);
  EXPECT_EQ(exit_code(ErrorCode::Provider), 5);
  EXPECT_EQ(exit_code(ErrorCode::Limit), 6);
  EXPECT_EQ(exit_code(ErrorCode::Tool), 7);
  EXPECT_EQ(exit_code(ErrorCode::Sandbox), 7);
  EXPECT_EQ(exit_code(ErrorCode::Guardrail), 7);
  EXPECT_EQ(exit_code(ErrorCode::Memory), 8);
}

TEST(CliProviderOpt, ValuesAreJsonWhenTheyParseElseStrings) {
  using kernex::cli::parse_provider_opt;
  auto v = [](std::string_view arg) {
    auto r = parse_provider_opt(arg);
    EXPECT_TRUE(r) << arg;
    return r ? r->second : Json();
  };
  EXPECT_EQ(parse_provider_opt("temperature=0.2")->first, "temperature");
  EXPECT_EQ(v("n=42"), Json(42));
  EXPECT_EQ(v("t=0.5"), Json(0.5));
  EXPECT_EQ(v("b=true"), Json(true));
  EXPECT_EQ(v("z=null"), Json(nullptr));
  EXPECT_EQ(v("s=\"42\""), Json("42"));
  EXPECT_EQ(v("model=gpt-4o"), Json("gpt-4o"));
  EXPECT_EQ(v("url=http://127.0.0.1:9/x?a=b"), Json("http://127.0.0.1:9/x?a=b"));
  EXPECT_EQ(v("list=[1,2]"), (Json{1, 2}));
  EXPECT_EQ(v("empty="), Json(""));
  EXPECT_FALSE(parse_provider_opt("novalue"));
  EXPECT_FALSE(parse_provider_opt("=x"));
  EXPECT_EQ(parse_provider_opt("=x").error().code, kernex::ErrorCode::Usage);
}

// A config key, a plugin file name or a config error holding ESC / C1 CSI reaches the terminal
// only as visible escapes: main's errors, doctor's text, the plugins list.
TEST_F(Cli, TerminalControlsInErrorsAndReportsAreShownEscaped) {
  auto raw = [](const std::string& t) {
    return t.find('\x1b') != std::string::npos || t.find("\xc2\x9b") != std::string::npos;
  };
  fs::path bad =
      write("kernex.yaml", "provider: replay\n\"li\\e]0;x\\amits\": {}\n\"\\x9b2J\": 1\n");
  auto run = kernex({"run", "--config", bad.string(), "hello"});
  EXPECT_EQ(run.exit_code, 3) << run.err;
  EXPECT_FALSE(raw(run.err)) << run.err;
  EXPECT_THAT(run.err, HasSubstr("li\\x1b]0;x\\x07mits"));

  auto doctor = kernex({"--config", bad.string(), "doctor"});
  EXPECT_EQ(doctor.exit_code, 0) << doctor.err;
  EXPECT_FALSE(raw(doctor.out + doctor.err)) << doctor.out;
  EXPECT_THAT(doctor.out, HasSubstr("\\x1b]0;x"));

  const fs::path plugins = dir_ / "plugins";
  fs::create_directories(plugins);
  std::ofstream(plugins / "libevil\x1b[2J.so") << "just text\n";
  env_["KERNEX_PLUGIN_PATH"] = plugins.string();
  auto listed = kernex({"plugins"});
  EXPECT_FALSE(raw(listed.out + listed.err)) << listed.out;
  EXPECT_THAT(listed.out, HasSubstr("libevil\\x1b[2J.so"));
}

}  // namespace

namespace {

// The issue's acceptance checks, end to end through bin/kernex with the real plugins.
std::string tool_call_line(int i) {
  return Json{{"tool_calls",
               {{{"id", "c" + std::to_string(i)},
                 {"name", "calculate"},
                 {"arguments", {{"expression", "6*7"}}}}}},
              {"usage", {{"input_tokens", 10}, {"output_tokens", 5}}}}
      .dump();
}

TEST_F(Cli, RunReplayToolCallThenAnswerReportsEndTurnAsJson) {
  auto script = write("s.jsonl", tool_call_line(1) + "\n" +
                                     Json{{"text", "It is 42."},
                                          {"usage", {{"input_tokens", 30}, {"output_tokens", 4}}}}
                                         .dump() +
                                     "\n");
  auto o = kernex({"run", "--provider", "replay", "--provider-opt", "script=" + script.string(),
                   "--json", "What is six times seven?"});
  ASSERT_EQ(o.exit_code, 0) << o.err;
  Json j = Json::parse(o.out);
  EXPECT_EQ(j["outcome"], "end_turn");
  EXPECT_EQ(j["turns"], 2);
  EXPECT_EQ(j["text"], "It is 42.");
  ASSERT_EQ(j["tool_calls"].size(), 1u);
  EXPECT_EQ(j["tool_calls"][0]["name"], "calculate");
  EXPECT_EQ(j["tool_calls"][0]["arguments"]["expression"], "6*7");
  EXPECT_EQ(j["tool_calls"][0]["result"], "42");
  EXPECT_EQ(j["tool_calls"][0]["is_error"], false);
  EXPECT_EQ(j["usage"]["input_tokens"], 40);
  EXPECT_EQ(j["usage"]["output_tokens"], 9);
  EXPECT_TRUE(j.contains("cost_usd"));
}

TEST_F(Cli, RunOfSixtyToolCallsStopsWithMaxTurnsAndExitsSix) {
  std::string text;
  for (int i = 0; i < 60; ++i) text += tool_call_line(i) + "\n";
  auto script = write("s.jsonl", text);
  auto o = kernex({"run", "--provider", "replay", "--provider-opt", "script=" + script.string(),
                   "--json", "loop"});
  EXPECT_EQ(o.exit_code, 6) << o.err;
  Json j = Json::parse(o.out);
  EXPECT_EQ(j["outcome"], "max_turns");
  EXPECT_EQ(j["turns"], 50);
  EXPECT_THAT(o.err, HasSubstr("max_turns"));
}

TEST_F(Cli, RunWithExhaustedScriptIsAProviderErrorExitFive) {
  auto script = write("s.jsonl", tool_call_line(1) + "\n");
  auto o =
      kernex({"run", "--provider", "replay", "--provider-opt", "script=" + script.string(), "hi"});
  EXPECT_EQ(o.exit_code, 5) << o.err;
  EXPECT_THAT(o.err, HasSubstr("no response left"));
}

TEST_F(Cli, PluginsListsEachBrokenFileWithItsCauseWhileGoodOnesLoad) {
  const fs::path broken = dir_ / "broken";
  fs::create_directories(broken);
  std::ofstream(broken / "libnot-a-plugin.so") << "just text\n";
  for (const char* name : {"libkernex-test-abi-mismatch.so", "libkernex-test-missing-factory.so"}) {
    fs::copy_file(fs::path(KERNEX_TEST_PLUGIN_DIR) / name, broken / name);
  }
  env_["KERNEX_PLUGIN_PATH"] = broken.string();
  auto o = kernex({"plugins", "--json"});
  EXPECT_EQ(o.exit_code, 4) << o.err;  // some plugin failed
  Json list = Json::parse(o.out);
  std::map<std::string, Json> by_file;
  for (const auto& p : list) by_file[fs::path(p["path"].get<std::string>()).filename()] = p;
  EXPECT_FALSE(by_file.at("libnot-a-plugin.so")["ok"].get<bool>());
  EXPECT_THAT(by_file.at("libkernex-test-abi-mismatch.so")["error"].get<std::string>(),
              HasSubstr("ABI"));
  EXPECT_THAT(by_file.at("libkernex-test-missing-factory.so")["error"].get<std::string>(),
              HasSubstr("factory"));
  for (const char* good : {"libkernex-provider-replay.so", "libkernex-toolbox-builtin.so",
                           "libkernex-hook-audit.so", "libkernex-memory-volatile.so"}) {
    ASSERT_TRUE(by_file.contains(good)) << good;
    EXPECT_TRUE(by_file.at(good)["ok"].get<bool>()) << good;
  }
  auto text = kernex({"plugins"});
  EXPECT_THAT(text.out, HasSubstr("libnot-a-plugin.so"));
  EXPECT_THAT(text.out, HasSubstr("replay"));
}

}  // namespace

namespace {

// A model answer holding ESC / C1 CSI: shown escaped by run, and by memory history and logs show
// reading it back; --json keeps the text itself (JSON-escaped).
TEST_F(Cli, ModelTextWithTerminalControlsIsShownEscapedWhereverItIsPrinted) {
  const std::string answer =
      "Done\x1b]0;owned\a \x1b[2J\xc2\x9b"
      "1m.";
  auto script =
      write("s.jsonl", Json{{"text", answer}}.dump() + "\n" + Json{{"text", answer}}.dump() + "\n");
  auto raw = [](const std::string& t) {
    return t.find('\x1b') != std::string::npos || t.find("\xc2\x9b") != std::string::npos;
  };
  const std::vector<std::string> run{"run", "--provider", "replay", "--provider-opt",
                                     "script=" + script.string()};
  auto shown = kernex({run[0], run[1], run[2], run[3], run[4], "hi"});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_FALSE(raw(shown.out)) << shown.out;
  EXPECT_THAT(shown.out, HasSubstr("Done\\x1b]0;owned\\x07 \\x1b[2J\\u009b1m."));

  auto json = kernex({run[0], run[1], run[2], run[3], run[4], "--json", "hi"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(Json::parse(json.out)["text"], answer);

  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"memory", "history"}, {"logs", "show", "last"}}) {
    auto o = kernex(args);
    EXPECT_EQ(o.exit_code, 0) << args[0] << ": " << o.err;
    EXPECT_FALSE(raw(o.out)) << args[0] << ": " << o.out;
    EXPECT_THAT(o.out, HasSubstr("\\x1b[2J")) << args[0] << ": " << o.out;
  }
}

// A message memory would refuse to save (not valid UTF-8, over memory's max_message_bytes) is
// refused before the first provider request, by `kernex run` and `kernex rlm` alike: the replay
// provider records every request it gets, and its record stays empty.
TEST_F(Cli, RefusedMessagesCostNoProviderRequest) {
  auto script = write("s.jsonl", std::string(R"({"text": "a paid answer"})") + "\n" +
                                     R"({"text": "a paid answer"})" + "\n");
  const fs::path record = dir_ / "record.jsonl";
  auto config =
      write("kernex.yaml", "provider: replay\nproviders: {replay: {script: " + script.string() +
                               ", record: " + record.string() +
                               "}}\nmemory:\n  name: sqlite\n  options:\n"
                               "    max_message_bytes: 64\n");
  const std::string not_utf8 = "caf\xc3 \xff\xfe";
  const std::string too_big(100, 'x');
  for (const char* command : {"run", "rlm"}) {
    SCOPED_TRACE(command);
    for (const auto& [message, why] :
         {std::pair{not_utf8, "UTF-8"}, std::pair{too_big, "max_message_bytes"}}) {
      auto o = kernex({command, "--config", config.string(), message});
      EXPECT_EQ(o.exit_code, 2) << o.out << o.err;
      EXPECT_THAT(o.err, HasSubstr("refused before any provider request")) << o.err;
      EXPECT_THAT(o.err, HasSubstr(why)) << o.err;
      EXPECT_FALSE(fs::exists(record)) << slurp(record);
    }
  }
  // The default memory (no `memory:` in the config) refuses text that is not UTF-8 too.
  auto plain =
      write("plain.yaml", "provider: replay\nproviders: {replay: {script: " + script.string() +
                              ", record: " + record.string() + "}}\n");
  auto o = kernex({"run", "--config", plain.string(), not_utf8});
  EXPECT_EQ(o.exit_code, 2) << o.out << o.err;
  EXPECT_FALSE(fs::exists(record)) << slurp(record);
  // What memory can keep is sent: the record proves the provider was reachable all along.
  auto fine = kernex({"run", "--config", config.string(), "hello"});
  EXPECT_EQ(fine.exit_code, 0) << fine.err;
  EXPECT_EQ(fine.out, "a paid answer\n");
  EXPECT_TRUE(fs::exists(record));
}

}  // namespace
