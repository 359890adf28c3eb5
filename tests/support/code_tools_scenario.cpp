#include "code_tools_scenario.hpp"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "kernex/skills/context_source.hpp"
#include "kernex/skills/loader.hpp"

namespace kernex::scenario {
namespace {

fs::path node_modules(const Environment& env) { return env.npm_dir / "node_modules"; }

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A JSON string is a YAML string and a Python string literal alike (for the paths used here).
std::string quoted(const std::string& s) { return Json(s).dump(); }

}  // namespace

Result<std::unique_ptr<Kernel>> make_kernel(const Environment& env, const KernelSpec& spec) {
  Json grants = Json::object();
  for (const auto& server : spec.servers)
    grants[server] = {{"read_only", {node_modules(env).string()}}};
  Config config;
  config.provider = {"replay",
                     {{"script", spec.script.string()}, {"record", spec.record.string()}}};
  config.toolboxes = std::vector<PluginRef>{
      {"repl", {{"workspace", spec.workspace.string()}, {"timeout", 60}, {"offer", "always"}}},
      {"mcp", {{"workspace", spec.workspace.string()}, {"servers", grants}}}};
  config.plugin_dirs = {env.plugin_dir};
  config.pricing_file = env.source_dir / "data/pricing.yaml";
  config.data_dir = spec.dir / "data";
  config.limits.budgets.max_turns = spec.max_turns;
  KERNEX_ASSIGN_OR_RETURN(auto kernel, Kernel::create(std::move(config)));
  auto loaded = skills::load_skills(spec.skill_dirs);
  if (!loaded.failures.empty()) {
    const auto& first = loaded.failures.front();
    return fail(ErrorCode::Skill,
                "scenario: skill " + first.path.string() + " failed to load: " + first.describe());
  }
  KERNEX_ASSIGN_OR_RETURN(
      auto source, skills::SkillContextSource::create(std::move(loaded.skills), spec.activate));
  kernel->add_context_source(std::move(source));
  return kernel;
}

void write_server_skill(const Environment& env, const fs::path& skills_dir,
                        const std::string& server, const std::string& package,
                        const std::vector<std::string>& args) {
  std::string list =
      quoted((node_modules(env) / "@modelcontextprotocol" / package / "dist/index.js").string());
  for (const auto& a : args) list += ", " + quoted(a);
  fs::create_directories(skills_dir / server);
  std::ofstream(skills_dir / server / "SKILL.md")
      << "---\nname: " << server << "\ndescription: The MCP server " << package << " from npm.\n"
      << "permissions: {commands: [node]}\n"
      << "mcp: {" << server << ": {command: " << quoted(env.node.string()) << ", args: [" << list
      << "]}}\n---\nThe tools of " << package << ".\n";
}

Json calls_line(const std::vector<Json>& calls) {
  Json list = Json::array();
  for (const auto& c : calls)
    list.push_back({{"id", "c" + std::to_string(list.size() + 1)},
                    {"name", c["name"]},
                    {"arguments", c["arguments"]}});
  return Json{{"tool_calls", std::move(list)}};
}

Json text_line(const std::string& text) { return Json{{"text", text}}; }

void write_script(const fs::path& path, const std::vector<Json>& lines) {
  std::ofstream out(path);
  for (const auto& line : lines) out << line.dump() << '\n';
}

AccessLog write_access_log(const fs::path& path) {
  AccessLog log;
  std::ofstream out(path, std::ios::binary);
  char line[160];
  for (int i = 0; i < 20000; ++i) {
    std::snprintf(line, sizeof line,
                  "2026-11-25T%02d:%02d:%02dZ host%d GET /api/v1/items/%d status=%s took=%dms "
                  "req=r%07d\n",
                  10 + i / 3600, i / 60 % 60, i % 60, i % 13, i, i % 997 == 0 ? "500" : "200",
                  i % 1000, i);
    out << line;
    if (i % 997 == 0) log.errors += line;
  }
  out.close();
  log.bytes = fs::file_size(path);
  return log;
}

namespace {

// The model's side of the scenario. Code: one eval_code that does the whole task. Direct: the
// model reads the log (so all of it joins the conversation), then writes the errors.
std::vector<Json> scenario_script(Mode mode, const fs::path& log, const fs::path& out,
                                  const std::string& errors) {
  const Json answer = text_line("21 server errors, copied to errors.log.");
  if (mode == Mode::DirectCalls) {
    return {calls_line({{{"name", "filesystem__read_text_file"},
                         {"arguments", {{"path", log.string()}}}}}),
            calls_line({{{"name", "filesystem__write_file"},
                         {"arguments", {{"path", out.string()}, {"content", errors}}}}}),
            answer};
  }
  // server-filesystem answers with text and the same text as structured content; the kernel
  // renders both into one str (text, then "[structured content] {json}"), so code keeps the text.
  const std::string code =
      "r = tools.filesystem__read_text_file(path=" + quoted(log.string()) +
      ")\n"
      "text = r['content'] if isinstance(r, dict) else r.split('\\n\\n[structured content] ')[0]\n"
      "errors = [line for line in text.splitlines() if ' status=500 ' in line]\n"
      "tools.filesystem__write_file(path=" +
      quoted(out.string()) +
      ", content='\\n'.join(errors) + '\\n')\n"
      "submit_result({'errors': len(errors), 'file': 'errors.log'})\n"
      "print(len(text), 'bytes read;', len(errors), 'errors written to errors.log')\n";
  return {calls_line({{{"name", "eval_code"}, {"arguments", {{"code", code}}}}}), answer};
}

}  // namespace

Outcome run_scenario(const Environment& env, Mode mode, const fs::path& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  const fs::path ws = dir / "ws";
  fs::create_directories(ws);
  Outcome outcome{
      Result<RunResult>(RunResult{}), {}, {}, write_access_log(ws / "access.log"), dir / "data"};
  write_server_skill(env, dir / "skills", "filesystem", "server-filesystem", {ws.string()});
  KernelSpec spec{dir,
                  ws,
                  {env.source_dir / "examples/code-tools/skills", dir / "skills"},
                  {"code-tools", "filesystem"},
                  {"filesystem"},
                  dir / "script.jsonl",
                  dir / "requests.jsonl"};
  write_script(spec.script,
               scenario_script(mode, ws / "access.log", ws / "errors.log", outcome.log.errors));
  auto kernel = make_kernel(env, spec);
  if (!kernel) {
    outcome.run = std::unexpected(kernel.error());
    return outcome;
  }
  outcome.run = (*kernel)->run(Request::from_text("scenario",
                                                  "Copy the server errors (status 500) of "
                                                  "access.log into errors.log."),
                               RunOptions{});
  std::ifstream record(spec.record);
  for (std::string line; std::getline(record, line);) outcome.requests.push_back(line);
  outcome.written = slurp(ws / "errors.log");
  return outcome;
}

std::uint64_t estimated_tokens(const std::vector<std::string>& requests) {
  std::uint64_t tokens = 0;
  for (const auto& r : requests) tokens += (r.size() + 3) / 4;
  return tokens;
}

}  // namespace kernex::scenario
