#include "kernex/config.hpp"
#include "kernex/number.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "env_guard.hpp"

namespace fs = std::filesystem;
using kernex::CompactionStrategy;
using kernex::Config;
using kernex::ErrorCode;
using kernex::Json;
using kernex::WorkspaceMode;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

using kernex::test::EnvGuard;

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "kernex-config-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    // Every test starts from a known environment.
    env_.unset("KERNEX_CONFIG");
    env_.unset("KERNEX_DATA_DIR");
    env_.unset("XDG_DATA_HOME");
    env_.set("HOME", (dir_ / "home").string());
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p;
  }

  // Parses as if read from "kernex.yaml" (no directory: relative paths stay relative).
  static Config parse_ok(const std::string& text) {
    auto c = Config::parse_yaml(text, "kernex.yaml");
    EXPECT_TRUE(c.has_value()) << (c ? "" : c.error().describe());
    return c ? *c : Config{};
  }
  static std::string parse_error(const std::string& text) {
    auto c = Config::parse_yaml(text, "kernex.yaml");
    EXPECT_FALSE(c.has_value()) << "expected an error for:\n" << text;
    if (c) return "";
    EXPECT_EQ(c.error().code, ErrorCode::Config);
    return c.error().describe();
  }

  fs::path dir_;
  EnvGuard env_;
};

TEST_F(ConfigTest, DefaultsWithoutAFile) {
  auto c = Config::load(std::nullopt);
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_FALSE(c->source);
  EXPECT_EQ(c->data_dir, dir_ / "home" / ".local" / "share" / "kernex");
  EXPECT_TRUE(c->plugin_dirs.empty());
  EXPECT_TRUE(c->skill_dirs.empty());
  EXPECT_EQ(c->system_prompt, "");
  EXPECT_EQ(c->channel, "cli");
  EXPECT_EQ(c->project, "");
  EXPECT_EQ(c->provider.name, "");  // the CLI asks for --provider
  EXPECT_EQ(c->provider.config, Json::object());
  EXPECT_TRUE(c->provider_options.empty());
  ASSERT_TRUE(c->memory);  // memory is on: the sqlite store in <data_dir>/memory.db
  EXPECT_EQ(c->memory->name, "sqlite");
  EXPECT_EQ(c->memory->config, Json::object());
  EXPECT_TRUE(c->hooks.empty());
  EXPECT_FALSE(c->toolboxes.has_value());
  EXPECT_FALSE(c->permissions_file);
  EXPECT_TRUE(c->allow.empty());
  EXPECT_TRUE(c->deny.empty());
  EXPECT_FALSE(c->pricing_file);
  EXPECT_EQ(c->limits.budgets.max_turns, 50u);
  EXPECT_FALSE(c->limits.budgets.token_budget);
  EXPECT_FALSE(c->limits.budgets.cost_budget_usd);
  EXPECT_FALSE(c->limits.budgets.tool_call_budget);
  EXPECT_EQ(c->limits.max_context_messages, 50u);
  EXPECT_EQ(c->limits.compaction, CompactionStrategy::Drop);
  EXPECT_EQ(c->limits.conversation_idle, std::chrono::minutes(120));
}

TEST_F(ConfigTest, EmptyFileGivesDefaults) {
  Config c = parse_ok("");
  EXPECT_EQ(c.channel, "cli");
  EXPECT_EQ(c.limits.budgets.max_turns, 50u);
  Config comments = parse_ok("# nothing here\n");
  EXPECT_EQ(comments.channel, "cli");
}

TEST_F(ConfigTest, MemoryDefaultsToSqliteAndNoneTurnsItOff) {
  ASSERT_TRUE(parse_ok("").memory);
  EXPECT_EQ(parse_ok("").memory->name, "sqlite");
  ASSERT_TRUE(parse_ok("memory:\n").memory);  // null: not set, the default stays
  EXPECT_EQ(parse_ok("memory: ~\n").memory->name, "sqlite");
  EXPECT_FALSE(parse_ok("memory: none\n").memory);
  EXPECT_FALSE(parse_ok("memory: {name: none}\n").memory);
  ASSERT_TRUE(parse_ok("memory: volatile\n").memory);
  EXPECT_EQ(parse_ok("memory: volatile\n").memory->name, "volatile");
}

TEST_F(ConfigTest, DataDirDefaultFollowsXdgDataHome) {
  env_.set("XDG_DATA_HOME", (dir_ / "xdg").string());
  EXPECT_EQ(parse_ok("").data_dir, dir_ / "xdg" / "kernex");
  // The XDG spec says relative values are invalid and must be ignored.
  env_.set("XDG_DATA_HOME", "relative/xdg");
  EXPECT_EQ(parse_ok("").data_dir, dir_ / "home" / ".local" / "share" / "kernex");
}

TEST_F(ConfigTest, EveryKey) {
  Config c = parse_ok(R"yaml(
data_dir: /var/lib/kernex
plugin_dirs: [/opt/kernex/plugins, /usr/local/lib/kernex]
skill_dirs:
  - /srv/skills
system_prompt: "You are helpful."
channel: api
project: demo
provider:
  name: anthropic
  options:
    model: claude-sonnet
    max_tokens: 1024
providers:
  openai: {base_url: "http://127.0.0.1:8080", timeout_s: 2.5}
  ollama:
memory: sqlite
hooks:
  - audit
  - name: redact
    options: {patterns: [secret, token]}
toolboxes: [shell, {name: web, options: {allow_hosts: [example.com]}}]
permissions:
  file: /etc/kernex/rules.txt
  allow: ["Bash(git *)"]
  deny: ["Read(/etc/shadow)", "Bash(rm *)"]
pricing_file: /etc/kernex/pricing.yaml
limits:
  max_turns: 12
  token_budget: 100000
  cost_budget_usd: 0.75
  tool_call_budget: 30
  max_context_messages: 80
  compaction: summarize
  conversation_idle_minutes: 15
)yaml");
  EXPECT_EQ(c.data_dir, fs::path("/var/lib/kernex"));
  EXPECT_EQ(c.plugin_dirs, (std::vector<fs::path>{"/opt/kernex/plugins", "/usr/local/lib/kernex"}));
  EXPECT_EQ(c.skill_dirs, (std::vector<fs::path>{"/srv/skills"}));
  EXPECT_EQ(c.system_prompt, "You are helpful.");
  EXPECT_EQ(c.channel, "api");
  EXPECT_EQ(c.project, "demo");
  EXPECT_EQ(c.provider.name, "anthropic");
  EXPECT_EQ(c.provider.config, (Json{{"model", "claude-sonnet"}, {"max_tokens", 1024}}));
  ASSERT_EQ(c.provider_options.size(), 2u);
  EXPECT_EQ(c.provider_options.at("openai"),
            (Json{{"base_url", "http://127.0.0.1:8080"}, {"timeout_s", 2.5}}));
  EXPECT_EQ(c.provider_options.at("ollama"), Json::object());
  ASSERT_TRUE(c.memory);
  EXPECT_EQ(c.memory->name, "sqlite");
  EXPECT_EQ(c.memory->config, Json::object());
  ASSERT_EQ(c.hooks.size(), 2u);
  EXPECT_EQ(c.hooks[0].name, "audit");
  EXPECT_EQ(c.hooks[1].name, "redact");
  EXPECT_EQ(c.hooks[1].config, (Json{{"patterns", {"secret", "token"}}}));
  ASSERT_TRUE(c.toolboxes.has_value());
  ASSERT_EQ(c.toolboxes->size(), 2u);
  EXPECT_EQ((*c.toolboxes)[0].name, "shell");
  EXPECT_EQ((*c.toolboxes)[1].name, "web");
  EXPECT_EQ((*c.toolboxes)[1].config, (Json{{"allow_hosts", {"example.com"}}}));
  EXPECT_EQ(c.permissions_file, fs::path("/etc/kernex/rules.txt"));
  EXPECT_EQ(c.allow, (std::vector<std::string>{"Bash(git *)"}));
  EXPECT_EQ(c.deny, (std::vector<std::string>{"Read(/etc/shadow)", "Bash(rm *)"}));
  EXPECT_EQ(c.pricing_file, fs::path("/etc/kernex/pricing.yaml"));
  EXPECT_EQ(c.limits.budgets.max_turns, 12u);
  EXPECT_EQ(c.limits.budgets.token_budget, 100000u);
  EXPECT_EQ(c.limits.budgets.cost_budget_usd, 0.75);
  EXPECT_EQ(c.limits.budgets.tool_call_budget, 30u);
  EXPECT_EQ(c.limits.max_context_messages, 80u);
  EXPECT_EQ(c.limits.compaction, CompactionStrategy::Summarize);
  EXPECT_EQ(c.limits.conversation_idle, std::chrono::minutes(15));
}

TEST_F(ConfigTest, ProviderAndMemoryAsPlainNames) {
  Config c = parse_ok("provider: replay\nmemory: {name: sqlite, options: {path: mem.db}}\n");
  EXPECT_EQ(c.provider.name, "replay");
  EXPECT_EQ(c.provider.config, Json::object());
  ASSERT_TRUE(c.memory);
  EXPECT_EQ(c.memory->config, (Json{{"path", "mem.db"}}));  // plugin options are not paths to us
}

TEST_F(ConfigTest, OptionScalarsFollowTheCoreSchema) {
  Config c = parse_ok(R"yaml(
providers:
  x:
    int: 42
    negative: -7
    hex: 0x1F
    float: 0.5
    exp: 1e3
    yes_true: true
    no_false: False
    nothing: ~
    empty:
    quoted_number: "42"
    single_quoted: 'true'
    tagged: !!str 7
    word_yes: yes
    infinity: .inf
    huge: 123456789012345678901234567890
    text: hello world
    block: |
      line
    list: [1, two, 3.0]
    nested: {a: {b: [x]}}
)yaml");
  const Json& o = c.provider_options.at("x");
  EXPECT_EQ(o.at("int"), Json(42));
  EXPECT_TRUE(o.at("int").is_number_integer());
  EXPECT_EQ(o.at("negative"), Json(-7));
  EXPECT_EQ(o.at("hex"), Json(31));
  EXPECT_TRUE(o.at("float").is_number_float());
  EXPECT_EQ(o.at("float"), Json(0.5));
  EXPECT_EQ(o.at("exp"), Json(1000.0));
  EXPECT_EQ(o.at("yes_true"), Json(true));
  EXPECT_EQ(o.at("no_false"), Json(false));
  EXPECT_TRUE(o.at("nothing").is_null());
  EXPECT_TRUE(o.at("empty").is_null());
  EXPECT_EQ(o.at("quoted_number"), Json("42"));
  EXPECT_EQ(o.at("single_quoted"), Json("true"));
  EXPECT_EQ(o.at("tagged"), Json("7"));
  EXPECT_EQ(o.at("word_yes"), Json("yes"));   // YAML 1.1 booleans are not booleans here
  EXPECT_EQ(o.at("infinity"), Json(".inf"));  // JSON has no infinity
  EXPECT_EQ(o.at("huge"), Json("123456789012345678901234567890"));
  EXPECT_EQ(o.at("text"), Json("hello world"));
  EXPECT_EQ(o.at("block"), Json("line\n"));
  EXPECT_EQ(o.at("list"), (Json{1, "two", 3.0}));
  EXPECT_EQ(o.at("nested"), (Json{{"a", {{"b", {"x"}}}}}));
}

TEST_F(ConfigTest, NullValuesKeepDefaults) {
  Config c = parse_ok("channel:\nlimits:\n  max_turns: ~\nprovider:\nplugin_dirs:\n");
  EXPECT_EQ(c.channel, "cli");
  EXPECT_EQ(c.limits.budgets.max_turns, 50u);
  EXPECT_EQ(c.provider.name, "");
  EXPECT_TRUE(c.plugin_dirs.empty());
}

TEST_F(ConfigTest, StringFieldsTakeAnyScalarsText) {
  Config c = parse_ok("project: 123\nchannel: true\n");
  EXPECT_EQ(c.project, "123");
  EXPECT_EQ(c.channel, "true");
}

TEST_F(ConfigTest, WorkspaceModeIsPlainOrOverlay) {
  EXPECT_EQ(parse_ok("").workspace_mode, WorkspaceMode::Plain);
  EXPECT_EQ(parse_ok("workspace: {mode: overlay}\n").workspace_mode, WorkspaceMode::Overlay);
  EXPECT_EQ(parse_ok("workspace:\n  mode: plain\n").workspace_mode, WorkspaceMode::Plain);
  EXPECT_EQ(parse_ok("workspace:\n").workspace_mode, WorkspaceMode::Plain);
  EXPECT_EQ(parse_ok("workspace: {mode: ~}\n").workspace_mode, WorkspaceMode::Plain);
  EXPECT_EQ(parse_error("workspace: {mode: layered}\n"),
            "kernex.yaml:1: workspace.mode: expected overlay or plain, got \"layered\"");
  EXPECT_THAT(parse_error("workspace: {mode: [overlay]}\n"),
              HasSubstr("workspace.mode: expected a string, got a list"));
  EXPECT_THAT(parse_error("workspace:\n  mode: overlay\n  upper: /x\n"),
              HasSubstr("kernex.yaml:3: workspace.upper: unknown key (expected one of: mode)"));
  EXPECT_THAT(parse_error("workspace: overlay\n"),
              HasSubstr("workspace: expected a mapping, got \"overlay\""));
  EXPECT_THAT(parse_error("workspace:\n  mode: overlay\n  mode: plain\n"),
              HasSubstr("workspace.mode: duplicate key"));
}

TEST_F(ConfigTest, UnknownTopLevelKeyNamesKeyAndLine) {
  std::string e = parse_error("channel: cli\n\nlimts:\n  max_turns: 3\n");
  EXPECT_THAT(e, HasSubstr("kernex.yaml:3: limts: unknown key"));
  EXPECT_THAT(e, HasSubstr("limits"));  // the list of valid keys
}

TEST_F(ConfigTest, UnknownNestedKeysNameTheFullPath) {
  EXPECT_THAT(parse_error("limits:\n  max_turns: 3\n  max_tunrs: 4\n"),
              HasSubstr("kernex.yaml:3: limits.max_tunrs: unknown key"));
  EXPECT_THAT(parse_error("permissions:\n  alow: [x]\n"),
              HasSubstr("kernex.yaml:2: permissions.alow: unknown key"));
  EXPECT_THAT(parse_error("provider:\n  name: x\n  option: {}\n"),
              HasSubstr("kernex.yaml:3: provider.option: unknown key"));
  EXPECT_THAT(parse_error("hooks:\n  - audit\n  - name: redact\n    opts: {}\n"),
              HasSubstr("kernex.yaml:4: hooks[1].opts: unknown key"));
}

// Numbers from the file are finite and in range, or an error naming the key, value and range:
// a NaN budget compared false and switched its limit off; huge idle minutes overflowed chrono.
TEST_F(ConfigTest, NumbersOutOfRangeNameTheKeyAndTheRange) {
  for (const char* bad : {".nan", ".inf", "-.inf", "-0.5", "1e10", "1e999"}) {
    EXPECT_THAT(parse_error(std::string("limits:\n  cost_budget_usd: ") + bad + "\n"),
                HasSubstr("limits.cost_budget_usd: expected a number in [0, 1e+09]"))
        << bad;
  }
  EXPECT_EQ(parse_ok("limits:\n  cost_budget_usd: 1e9\n").limits.budgets.cost_budget_usd, 1e9);
  EXPECT_THAT(parse_error("limits:\n  conversation_idle_minutes: 99999999999\n"),
              HasSubstr("limits.conversation_idle_minutes: expected a non-negative integer no "
                        "larger than 5256000"));
  for (const char* bad : {"2.5", "-1", ".nan", "1e3", "99999999999999999999"}) {
    EXPECT_THAT(parse_error(std::string("limits:\n  tool_call_budget: ") + bad + "\n"),
                HasSubstr("limits.tool_call_budget: expected a non-negative integer"))
        << bad;
  }
}

TEST(CheckedNumber, RefusesNonFiniteFractionalAndOutOfRangeValuesNamingThem) {
  using kernex::checked_number;
  using kernex::checked_uint;
  EXPECT_EQ(*checked_number(Json(0.5), "x", 0, 1), 0.5);
  for (Json bad : {Json(std::nan("")), Json(INFINITY), Json(-1), Json(2), Json("1"), Json()}) {
    auto r = checked_number(bad, "timeout_secs", 0, 1);
    ASSERT_FALSE(r) << bad;
    EXPECT_THAT(r.error().message, HasSubstr("`timeout_secs`: expected a number in [0, 1], got"));
  }
  EXPECT_THAT(checked_number(Json(std::nan("")), "t", 0, 1).error().message, HasSubstr("got nan"));
  EXPECT_EQ(*checked_uint(Json(7), "n", 1, 10), 7u);
  for (Json bad : {Json(0), Json(11), Json(-1), Json(2.5), Json(1e300), Json(true)}) {
    auto r = checked_uint(bad, "max_retries", 1, 10);
    ASSERT_FALSE(r) << bad;
    EXPECT_THAT(r.error().message, HasSubstr("`max_retries`: expected an integer in [1, 10]"));
  }
  for (const char* bad : {"nan", "inf", "-1", "1e999", "0x10", " 1", "1 ", "", "2.5x"}) {
    EXPECT_FALSE(kernex::parse_number(bad, "--cost-budget", 0, 100)) << bad;
  }
  EXPECT_EQ(*kernex::parse_number("2.5", "f", 0, 100), 2.5);
  for (const char* bad : {"-1", "2.5", "18446744073709551616", "1e3", "+3"}) {
    EXPECT_FALSE(kernex::parse_uint(bad, "--max-turns", 0, 1000)) << bad;
  }
  // Seconds to milliseconds never overflows, whatever the double.
  EXPECT_EQ(kernex::seconds_to_ms(1e300), kernex::kMaxOptionDuration);
  EXPECT_EQ(kernex::seconds_to_ms(std::nan("")).count(), 0);
  EXPECT_EQ(kernex::seconds_to_ms(-5).count(), 0);
  EXPECT_EQ(kernex::seconds_to_ms(1.5).count(), 1500);
  EXPECT_EQ(kernex::saturate(std::chrono::milliseconds::max()), kernex::kMaxOptionDuration);
}

TEST_F(ConfigTest, WrongTypesNameKeyLineAndValue) {
  EXPECT_EQ(parse_error("# limits\nchannel: cli\nproject: p\nsystem_prompt: s\nprovider: replay\n"
                        "limits:\n  max_turns: ten\n"),
            "kernex.yaml:7: limits.max_turns: expected a non-negative integer, got \"ten\"");
  EXPECT_THAT(
      parse_error("limits:\n  max_turns: -3\n"),
      HasSubstr("kernex.yaml:2: limits.max_turns: expected a non-negative integer, got -3"));
  EXPECT_THAT(parse_error("limits:\n  max_turns: \"10\"\n"),
              HasSubstr("limits.max_turns: expected a non-negative integer"));
  EXPECT_THAT(parse_error("limits:\n  max_turns: 2.5\n"), HasSubstr("limits.max_turns"));
  EXPECT_THAT(
      parse_error("limits:\n  max_turns: 5000000000\n"),
      HasSubstr("limits.max_turns: expected a non-negative integer no larger than 4294967295"));
  EXPECT_THAT(parse_error("limits:\n  token_budget: [1]\n"),
              HasSubstr("limits.token_budget: expected a non-negative integer, got a list"));
  EXPECT_THAT(parse_error("limits:\n  cost_budget_usd: -1\n"),
              HasSubstr("limits.cost_budget_usd: expected a number in [0, 1e+09], got -1"));
  EXPECT_THAT(parse_error("limits:\n  cost_budget_usd: cheap\n"),
              HasSubstr("limits.cost_budget_usd"));
  EXPECT_THAT(parse_error("limits:\n  compaction: squash\n"),
              HasSubstr("limits.compaction: expected drop or summarize, got \"squash\""));
  EXPECT_THAT(parse_error("limits: 5\n"),
              HasSubstr("kernex.yaml:1: limits: expected a mapping, got 5"));
  EXPECT_THAT(parse_error("plugin_dirs: /opt/x\n"),
              HasSubstr("plugin_dirs: expected a list of paths, got \"/opt/x\""));
  EXPECT_THAT(parse_error("skill_dirs:\n  - a\n  - [b]\n"),
              HasSubstr("kernex.yaml:3: skill_dirs[1]: expected a path"));
  EXPECT_THAT(parse_error("system_prompt: {a: b}\n"),
              HasSubstr("system_prompt: expected a string, got a mapping"));
  EXPECT_THAT(parse_error("provider: [a]\n"),
              HasSubstr("provider: expected a plugin name or a mapping {name, options}"));
  EXPECT_THAT(parse_error("provider:\n  options: {}\n"), HasSubstr("provider: missing key `name`"));
  EXPECT_THAT(parse_error("provider: {name: x, options: [1]}\n"),
              HasSubstr("provider.options: expected a mapping of options"));
  EXPECT_THAT(parse_error("providers:\n  x: 3\n"),
              HasSubstr("kernex.yaml:2: providers.x: expected a mapping of options, got 3"));
  EXPECT_THAT(parse_error("providers: [x]\n"), HasSubstr("providers: expected a mapping"));
  EXPECT_THAT(parse_error("hooks: audit\n"), HasSubstr("hooks: expected a list of plugins"));
  EXPECT_THAT(parse_error("toolboxes:\n  - shell\n  -\n"),
              HasSubstr("toolboxes[1]: expected a plugin name"));
  EXPECT_THAT(parse_error("permissions:\n  deny: [a, [b]]\n"),
              HasSubstr("permissions.deny[1]: expected a string, got a list"));
  EXPECT_THAT(parse_error("data_dir: \"\"\n"),
              HasSubstr("data_dir: expected a path, got an empty string"));
  EXPECT_THAT(parse_error("- a\n- b\n"), HasSubstr("expected a mapping of settings, got a list"));
}

TEST_F(ConfigTest, DuplicateKeysAreErrors) {
  EXPECT_THAT(parse_error("channel: a\nchannel: b\n"),
              HasSubstr("kernex.yaml:2: channel: duplicate key"));
  EXPECT_THAT(parse_error("providers:\n  x: {a: 1, a: 2}\n"),
              HasSubstr("providers.x.a: duplicate key"));
}

TEST_F(ConfigTest, InvalidYamlNamesTheLine) {
  EXPECT_THAT(parse_error("channel: cli\nplugin_dirs: [a,\n  b\n"), HasSubstr("kernex.yaml:"));
  EXPECT_THAT(parse_error("channel: cli\nplugin_dirs: [a,\n  b\n"), HasSubstr("invalid YAML"));
  EXPECT_THAT(parse_error("channel: {a: 1\n"), HasSubstr("invalid YAML"));
}

TEST_F(ConfigTest, HostileOptionsBecomeErrors) {
  // Each level doubles through aliases: 2^25 leaves if expanded.
  std::string bomb = "providers:\n  x:\n    l0: &l0 [a, a]\n";
  for (int i = 1; i < 25; ++i)
    bomb += "    l" + std::to_string(i) + ": &l" + std::to_string(i) + " [*l" +
            std::to_string(i - 1) + ", *l" + std::to_string(i - 1) + "]\n";
  EXPECT_THAT(parse_error(bomb), HasSubstr("too many values"));

  std::string deep =
      "providers:\n  x:\n    v: " + std::string(100, '[') + std::string(100, ']') + "\n";
  EXPECT_THAT(parse_error(deep), HasSubstr("nested more than"));
}

TEST_F(ConfigTest, RelativePathsResolveAgainstTheFilesDirectory) {
  fs::path file = write(
      "conf/kernex.yaml",
      "data_dir: data\nplugin_dirs: [plugins, ../shared/plugins, /abs]\nskill_dirs: [./skills]\n"
      "permissions: {file: rules.txt}\npricing_file: prices/pricing.yaml\n");
  auto c = Config::load(file);
  ASSERT_TRUE(c) << c.error().describe();
  const fs::path base = dir_ / "conf";
  EXPECT_EQ(c->source, file);
  EXPECT_EQ(c->data_dir, base / "data");
  EXPECT_EQ(c->plugin_dirs,
            (std::vector<fs::path>{base / "plugins", dir_ / "shared" / "plugins", "/abs"}));
  EXPECT_EQ(c->skill_dirs, (std::vector<fs::path>{base / "skills"}));
  EXPECT_EQ(c->permissions_file, base / "rules.txt");
  EXPECT_EQ(c->pricing_file, base / "prices" / "pricing.yaml");
}

TEST_F(ConfigTest, ParseYamlResolvesAgainstTheOriginsDirectory) {
  auto c = Config::parse_yaml("plugin_dirs: [p]\n", "/etc/kernex/kernex.yaml");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->plugin_dirs, (std::vector<fs::path>{"/etc/kernex/p"}));
  EXPECT_EQ(parse_ok("plugin_dirs: [p]\n").plugin_dirs, (std::vector<fs::path>{"p"}));
}

TEST_F(ConfigTest, TildeExpandsToHome) {
  Config c = parse_ok("data_dir: ~/kx\nskill_dirs: [\"~\", ~/s]\n");
  EXPECT_EQ(c.data_dir, dir_ / "home" / "kx");
  EXPECT_EQ(c.skill_dirs, (std::vector<fs::path>{dir_ / "home", dir_ / "home" / "s"}));
}

TEST_F(ConfigTest, LoadReportsErrorsWithTheFileName) {
  fs::path file = write("bad.yaml", "channel: cli\nlimits:\n  max_turns: ten\n");
  auto c = Config::load(file);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::Config);
  EXPECT_EQ(c.error().describe(),
            file.string() + ":3: limits.max_turns: expected a non-negative integer, got \"ten\"");
}

TEST_F(ConfigTest, MissingExplicitFileIsAnError) {
  auto c = Config::load(dir_ / "nope.yaml");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::Config);
  EXPECT_THAT(c.error().describe(), HasSubstr("nope.yaml"));
  EXPECT_THAT(c.error().describe(), HasSubstr("does not exist"));
  auto d = Config::load(dir_);
  ASSERT_FALSE(d);
  EXPECT_THAT(d.error().describe(), HasSubstr("not a regular file"));
}

TEST_F(ConfigTest, KernexConfigNamesTheFileWhenNoneIsGiven) {
  fs::path file = write("env.yaml", "channel: from-env\n");
  env_.set("KERNEX_CONFIG", file.string());
  auto c = Config::load(std::nullopt);
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_EQ(c->channel, "from-env");
  EXPECT_EQ(c->source, file);

  // An explicit file wins over the environment.
  fs::path explicit_file = write("explicit.yaml", "channel: explicit\n");
  auto e = Config::load(explicit_file);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->channel, "explicit");
}

TEST_F(ConfigTest, KernexConfigNamingAMissingFileIsAnError) {
  env_.set("KERNEX_CONFIG", (dir_ / "missing.yaml").string());
  auto c = Config::load(std::nullopt);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::Config);
  EXPECT_THAT(c.error().describe(), HasSubstr("missing.yaml"));
  EXPECT_THAT(c.error().describe(), HasSubstr("KERNEX_CONFIG"));
}

TEST_F(ConfigTest, EmptyKernexConfigMeansUnset) {
  env_.set("KERNEX_CONFIG", "");
  auto c = Config::load(std::nullopt);
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->source);
}

TEST_F(ConfigTest, KernexDataDirOverridesTheFile) {
  fs::path file = write("kernex.yaml", "data_dir: /from/file\n");
  env_.set("KERNEX_DATA_DIR", "/from/env");
  auto c = Config::load(file);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->data_dir, fs::path("/from/env"));

  env_.set("KERNEX_DATA_DIR", "~/data");
  auto home = Config::load(std::nullopt);
  ASSERT_TRUE(home);
  EXPECT_EQ(home->data_dir, dir_ / "home" / "data");

  env_.set("KERNEX_DATA_DIR", "rel/dir");  // relative to the working directory
  auto rel = Config::load(std::nullopt);
  ASSERT_TRUE(rel);
  EXPECT_EQ(rel->data_dir, (fs::current_path() / "rel" / "dir").lexically_normal());

  env_.unset("KERNEX_DATA_DIR");
  auto unset = Config::load(file);
  ASSERT_TRUE(unset);
  EXPECT_EQ(unset->data_dir, fs::path("/from/file"));
}

TEST_F(ConfigTest, OversizedFileIsRejected) {
  fs::path file = write("big.yaml", "system_prompt: \"" + std::string(2 << 20, 'x') + "\"\n");
  auto c = Config::load(file);
  ASSERT_FALSE(c);
  EXPECT_THAT(c.error().describe(), HasSubstr("larger than"));
}

TEST(DefaultPricingFile, NamesPricingYaml) {
  EXPECT_EQ(kernex::default_pricing_file().filename(), "pricing.yaml");
  EXPECT_TRUE(kernex::default_pricing_file().is_absolute());
}

}  // namespace

TEST_F(ConfigTest, ChannelsAreNamedOnceWithOptions) {
  Config c = parse_ok(
      "channels:\n  - name: telegram\n    options: {token_env: TG, allowed_users: [1]}\n"
      "  - inbox\n");
  ASSERT_EQ(c.channels.size(), 2u);
  EXPECT_EQ(c.channels[0].name, "telegram");
  EXPECT_EQ(c.channels[0].config, (Json{{"token_env", "TG"}, {"allowed_users", {1}}}));
  EXPECT_EQ(c.channels[1].name, "inbox");
  EXPECT_TRUE(parse_ok("{}\n").channels.empty());
  EXPECT_THAT(parse_error("channels:\n  - telegram\n  - telegram\n"),
              HasSubstr("kernex.yaml:3: channels[1]: duplicate channel `telegram`"));
  EXPECT_THAT(parse_error("channels:\n  - name: ../up\n"),
              HasSubstr("channels[0]: expected a channel name of letters"));
  EXPECT_THAT(parse_error("channels:\n  - name: telegram\n    option: {}\n"),
              HasSubstr("channels[0].option: unknown key"));
  EXPECT_THAT(parse_error("channels: telegram\n"),
              HasSubstr("channels: expected a list of plugins"));
}

TEST_F(ConfigTest, UnknownKeysSuggestTheNearestOne) {
  EXPECT_THAT(parse_error("limits:\n  max_tunrs: 4\n"), HasSubstr("did you mean `max_turns`?"));
  EXPECT_THAT(parse_error("limts: {}\n"), HasSubstr("did you mean `limits`?"));
  EXPECT_THAT(parse_error("zzzzzzzz: 1\n"), Not(HasSubstr("did you mean")));
}

TEST_F(ConfigTest, IntegersTooLongForSixtyFourBitsNameTheRange) {
  EXPECT_THAT(parse_error("limits:\n  token_budget: 99999999999999999999999\n"),
              HasSubstr("limits.token_budget: expected a non-negative integer no larger than "
                        "18446744073709551615"));
  EXPECT_THAT(parse_error("limits:\n  max_turns: \"10\"\n"),
              HasSubstr("limits.max_turns: expected a non-negative integer"));
}
