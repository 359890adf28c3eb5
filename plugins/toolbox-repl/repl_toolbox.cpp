// The REPL toolbox: a persistent, sandboxed Python worker per run (per session and span), with
// tools to load large contexts as variables, look at them, and run code that may call the model
// again through the run's services (llm_query, llm_query_batched, rlm_query) and the run's other
// tools (tools.call: through the kernel, so hooks, rules and budgets apply as to the model's).
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <map>
#include <mutex>
#include <optional>

#include "kernex/kernel_files.hpp"
#include "kernex/log.hpp"
#include "kernex/plugin.hpp"
#include "kernex/run_services.hpp"
#include "kernex/sandbox/spawn.hpp"
#include "kernex/skills/trust.hpp"
#include "kernex/trajectory.hpp"
#include "eval_reply.hpp"
#include "repl_options.hpp"
#include "repl_session.hpp"
#include "saved_skills.hpp"
#include "servers_tree.hpp"
#include "worker_pool.hpp"

namespace kernex::repl {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::seconds kStartupTimeout{30};

Json string_param(const char* description) {
  return Json{{"type", "string"}, {"description", description}};
}
Json integer_param(const char* description) {
  return Json{{"type", "integer"}, {"description", description}};
}

std::vector<ToolSpec> tool_specs() {
  auto object = [](Json properties, std::vector<std::string> required) {
    return Json{{"type", "object"},
                {"properties", std::move(properties)},
                {"required", std::move(required)},
                {"additionalProperties", false}};
  };
  return {
      {"load_context",
       "Load a text into the REPL as a variable: a dict with content, lines, line_count, size, "
       "type and metadata. "
       "Give exactly one of text or file (a path in the workspace).",
       object({{"name", string_param("variable name (a Python identifier)")},
               {"text", string_param("the text to load")},
               {"file", string_param("a file to load, relative to the workspace")}},
              {"name"}),
       {"repl", "variable", "file"}},
      {"list_vars",
       "List the REPL's variables with their type, size and a short preview.",
       object(Json::object(), {}),
       {"repl"}},
      {"peek",
       "Show part of a variable: lines start..end of a context, characters of a string, items of a "
       "list "
       "(0-based, end exclusive; negative counts from the end).",
       object({{"name", string_param("variable name")},
               {"start", integer_param("first index")},
               {"end", integer_param("index after the last")}},
              {"name"}),
       {"repl", "slice"}},
      {"scan",
       "Search a variable's lines with a regular expression (Python re); returns matching line "
       "numbers and text.",
       object({{"name", string_param("variable name")},
               {"pattern", string_param("regular expression")},
               {"max_hits", integer_param("most hits to return (default 20)")}},
              {"name", "pattern"}),
       {"repl", "grep", "search"}},
      {"eval_code",
       "Run Python in the persistent REPL. Variables persist between calls. Returns stdout, "
       "stderr, any error "
       "with its traceback, wall time, CPU time (the worker's since its previous answer) and peak "
       "memory (null "
       "until the worker outgrows the kernel's own peak, which the OS folds into it). Inside, "
       "tools.<name>(**args) or tools.call(name, **args) run the run's other tools (tools.list() "
       "names them, help(tools.<name>) shows one; a JSON result comes back as a dict or list, "
       "text as a str, a failure raises ToolError) and only what the code prints reaches you; "
       "the same tools are modules in servers/ (read-only, in the working directory: "
       "os.listdir('servers'), servers/README.md lists them; import servers.<server>.<tool>; "
       "search_tools(query, detail='name'|'description'|'schema') finds them); "
       "save_skill(name, code, description) keeps code as a skill that later runs import as "
       "skills.<name> once a person trusted it; checkpoint() and restore() keep variables for "
       "the session; "
       "submit_result(value) records the run's result; llm_query(prompt, model=None), "
       "llm_query_batched(prompts, model=None) and rlm_query(prompt, context=None) call the model "
       "again.",
       object({{"code", string_param("Python source")}}, {"code"}),
       {"python", "repl", "code"}},
      {"provide_answers",
       "Answer pending queries (deferred mode): {query_id: text}. Each answer becomes a variable "
       "named by its id "
       "and an entry in the dict `answers`.",
       object({{"answers",
                Json{{"type", "object"}, {"additionalProperties", Json{{"type", "string"}}}}}},
              {"answers"}),
       {"repl", "deferred"}},
  };
}

// eval_code in code mode (`tools: [eval_code]`), where it goes with every request and is the
// model's only way to work: what it needs to start, and where the rest is written (the servers/
// tree's README.md holds the whole API, read when needed, as the tools' own modules are).
constexpr const char* kCodeModeEval =
    "Run Python in a persistent REPL (variables persist); returns stdout, stderr, any error and "
    "timings. Only what the code prints reaches you. The run's tools are functions: "
    "tools.<name>(**args) returns a dict, list or str; a failure raises ToolError. "
    "servers/README.md lists the tools and the rest of the REPL's API.";

// The REPL tools the `tools` option names (all when it names none), in their usual order.
std::vector<ToolSpec> offered_specs(const std::vector<std::string>& names) {
  std::vector<ToolSpec> specs = tool_specs();
  if (!names.empty()) {
    std::erase_if(specs, [&](const ToolSpec& spec) {
      return std::find(names.begin(), names.end(), spec.name) == names.end();
    });
  }
  if (specs.size() == 1 && specs[0].name == "eval_code") specs[0].description = kCodeModeEval;
  return specs;
}

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

ToolResult result_of(const ToolCall& call, Json body, bool is_error) {
  return ToolResult{call.id, call.name,
                    body.is_string() ? body.get<std::string>()
                                     : body.dump(-1, ' ', false, Json::error_handler_t::replace),
                    is_error};
}

ToolResult error_of(const ToolCall& call, const std::string& message) {
  return ToolResult{call.id, call.name, message, true};
}

// What one eval_code did through the kernel: its id (the parent of the tools it called in the
// trajectory), how many tools it called, and the result it submitted.
struct CodeRun {
  std::string id;
  std::size_t tool_calls = 0;
  std::optional<Json> submitted;
};

bool is_repl_tool(const std::string& name) {
  static const std::vector<ToolSpec> specs = tool_specs();
  return std::any_of(specs.begin(), specs.end(), [&](const ToolSpec& s) { return s.name == name; });
}

Json refused(std::string why) { return Json{{"ok", false}, {"error", std::move(why)}}; }

bool looks_like_json(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  return first != std::string::npos && (text[first] == '{' || text[first] == '[');
}

Json over_cap(const std::string& tool, std::size_t size, std::size_t max_bytes) {
  return refused("the result of " + tool + " is " + std::to_string(size) +
                 " bytes, more than repl.tool_result_max_bytes (" + std::to_string(max_bytes) +
                 "), the most code receives; nothing was returned. Ask the tool for less, or "
                 "raise the cap in the repl toolbox's options.");
}

// The run's tools for code, minus the REPL's own (code already runs in it).
Json answer_tools_list(const RunHandles& run) {
  Json out = Json::array();
  if (!run.services) return Json{{"ok", true}, {"value", std::move(out)}};
  for (const auto& spec : run.services->tools()) {
    if (is_repl_tool(spec.name)) continue;
    out.push_back(
        {{"name", spec.name}, {"description", spec.description}, {"parameters", spec.parameters}});
  }
  return Json{{"ok", true}, {"value", std::move(out)}};
}

std::string dumped(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// The answer lines below are written out directly, in the order nlohmann would dump them: a JSON
// tree made only to be serialised costs more than the call's own work in the kernel.
CallAnswer value_answer(const std::string& value_json) {
  return CallAnswer::formatted(R"({"ok":true,"value":)" + value_json + '}');
}

// A tool's result as code gets it (see answer_tool_call); a result past the code's cap, from a
// tool that does not know the cap, fails instead of arriving cut.
CallAnswer tool_value(const std::string& tool, ToolResult result, std::size_t max_bytes) {
  if (!result.structured.is_null()) {
    Json& value = result.structured;
    auto content = value.is_object() ? value.find("content") : value.end();
    if (content != value.end() && content->is_string()) {
      std::string raw = std::move(content->get_ref<std::string&>());
      value.erase(content);
      if (raw.size() > max_bytes) return over_cap(tool, raw.size(), max_bytes);
      std::string line = R"({"ok":true,"raw":)" + std::to_string(raw.size()) +
                         R"(,"raw_key":"content","value":)" + dumped(value) + '}';
      return CallAnswer::formatted(std::move(line), std::move(raw));
    }
    const std::string text = dumped(value);
    if (text.size() > max_bytes) return over_cap(tool, text.size(), max_bytes);
    return value_answer(text);
  }
  if (result.content.size() > max_bytes) return over_cap(tool, result.content.size(), max_bytes);
  if (looks_like_json(result.content)) {
    Json parsed = parse_untrusted(result.content);
    if (parsed.is_object() || parsed.is_array()) return value_answer(dumped(parsed));
  }
  // The line first: the text is moved into the answer.
  std::string line = R"({"ok":true,"raw":)" + std::to_string(result.content.size()) + '}';
  return CallAnswer::formatted(std::move(line), std::move(result.content));
}

// A tool called from code, run by the kernel as a model's call would be, except that the tool
// returns its whole result up to `max_bytes` (RunHandles::code_result_max_bytes), not the model's
// cut view. Its structured result (MCP structuredContent, a built-in tool's JSON) comes back as
// a dict or list; otherwise a text that is a JSON object or array, else the text. A large text
// (or a structured result's "content") follows the answer line as raw bytes, unescaped.
CallAnswer answer_tool_call(const RunHandles& run, Json& call, CodeRun& code,
                            std::size_t max_bytes) {
  const auto name = call.find("name");
  if (name == call.end() || !name->is_string())
    return refused("tools.call: the tool's name must be a string");
  const std::string tool = name->get<std::string>();
  Json arguments = Json::object();
  if (const auto a = call.find("arguments"); a != call.end()) arguments = std::move(*a);
  if (!arguments.is_object()) return refused(tool + ": arguments must be keyword arguments");
  if (is_repl_tool(tool)) return refused(tool + " is the REPL's own tool; code already runs here");
  if (!run.services) return refused("no tools can be called from code here");
  ++code.tool_calls;
  ToolResult result = run.services->call_tool(
      ToolCall{code.id + "/t" + std::to_string(code.tool_calls), tool, std::move(arguments)},
      code.id, max_bytes);
  if (result.is_error) {
    const bool budget = result.content.starts_with(kToolBudgetText);
    return CallAnswer::formatted(std::string(R"({"budget":)") + (budget ? "true" : "false") +
                                 R"(,"error":)" + dumped(Json(std::move(result.content))) +
                                 R"(,"ok":false})");
  }
  return tool_value(tool, std::move(result), max_bytes);
}

// What the kernel keeps for code beyond its worker: where (the data dir; empty: memory only) and
// the session's last checkpoint.
struct Keeping {
  const std::filesystem::path& data_dir;
  const std::optional<std::string>& tenant;  // nullopt: unknown, nothing is kept on disk
  std::string& checkpoint;
};

// Whose saved skills and checkpoints a call may use. A host serving tenants registers the tool
// area their workspaces lie in (`<area>/<tenant>/...`, kernel_files.hpp); without one this
// process serves one person ("local"). A workspace outside every area of such a host has no
// tenant the kernel can name, so nothing of it is kept on disk rather than shared.
std::optional<std::string> tenant_of(const Context& context) {
  const std::vector<ToolArea> areas = tool_areas();
  if (areas.empty()) return "local";
  if (!context.workspace) return std::nullopt;
  const std::filesystem::path workspace = context.workspace->lexically_normal();
  for (const ToolArea& area : areas) {
    const std::filesystem::path inside = workspace.lexically_relative(area.path);
    if (inside.empty() || *inside.begin() == "..") continue;
    const std::string tenant = inside.begin()->string();
    if (!tenant.empty() && tenant.front() != '.') return tenant;
  }
  return std::nullopt;
}

// The session's checkpoint file, or an empty path when it is kept in memory only (no data dir,
// no tenant); an error when the place for it is not the kernel's own (a symlink, say).
Result<std::filesystem::path> checkpoint_path(const RunHandles& run, const Keeping& keep) {
  if (keep.data_dir.empty() || !keep.tenant || !run.services) return std::filesystem::path();
  // A sub-agent's REPL (span 0.1, ...) keeps its own, as its worker does.
  const std::string& span = run.services->span();
  return checkpoint_file(keep.data_dir, *keep.tenant,
                         run.services->session() + (span == "0" ? "" : "#" + span));
}

// checkpoint() and restore(): the worker's pickled variables (base64), kept by the kernel for the
// session beyond its worker and process (a file in the data dir). The kernel never unpickles them:
// they go back to a worker as sent, and a file read back is size-checked first.
CallAnswer answer_checkpoint(const RunHandles& run, const std::string& kind, const Json& call,
                             const Keeping& keep, std::size_t max_bytes) {
  const auto path = checkpoint_path(run, keep);
  if (!path) return refused(kind + ": " + path.error().describe());
  const std::filesystem::path& file = *path;
  if (kind == "restore") {
    if (keep.checkpoint.empty() && !file.empty()) {
      auto read = read_checkpoint(file, max_bytes);
      if (!read) return refused("restore: " + read.error().describe());
      keep.checkpoint = std::move(*read);
    }
    if (keep.checkpoint.empty())
      return refused("restore: nothing was checkpointed in this session");
    return CallAnswer(Json{{"ok", true}, {"raw", keep.checkpoint.size()}}, keep.checkpoint);
  }
  const auto data = call.find("data");
  if (data == call.end() || !data->is_string())
    return refused("checkpoint: the variables must come as a base64 str");
  if (data->get_ref<const std::string&>().size() > max_bytes)
    return refused("checkpoint: the variables are larger than " + std::to_string(max_bytes) +
                   " bytes (repl.tool_result_max_bytes)");
  keep.checkpoint = data->get<std::string>();
  Json value = {{"bytes", keep.checkpoint.size()}, {"persisted", false}};
  if (!file.empty()) {
    if (auto written = write_checkpoint(file, keep.checkpoint); !written)
      return refused("checkpoint: " + written.error().describe());
    value["persisted"] = true;
  }
  return Json{{"ok", true}, {"value", std::move(value)}};
}

// save_skill(name, code, description): a skill folder in the tenant's saved-skills area, untrusted
// until a person runs `kernex skills trust` on it.
CallAnswer answer_save_skill(const Json& call, const Keeping& keep) {
  auto text = [&](const char* key) -> std::optional<std::string> {
    const auto it = call.find(key);
    if (it == call.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  const auto name = text("name"), source = text("code"), description = text("description");
  if (!name || !source || !description)
    return refused("save_skill: name, code and description must be strs");
  if (keep.data_dir.empty() || !keep.tenant)
    return refused("save_skill: this REPL has no data dir to keep skills in");
  auto area = skills_area(keep.data_dir, *keep.tenant);
  if (!area) return refused(area.error().describe());
  auto folder = save_skill(*area, *name, *source, *description);
  if (!folder) return refused(folder.error().describe());
  return Json{{"ok", true},
              {"value",
               {{"name", *name},
                {"folder", folder->string()},
                {"trusted", false},
                {"trust_command", "kernex skills trust " + folder->string()}}}};
}

// The answer to one callback from running code: a tool, a submitted result, a sub-query, a
// checkpoint or a saved skill.
CallAnswer answer_call(const RunHandles& run, Json& call, CodeRun& code, std::size_t max_bytes,
                       const Keeping& keep) {
  // From sandboxed code: a field of another type is an unknown call, never an exception.
  const std::string kind = call.is_object() && call.contains("call") && call["call"].is_string()
                               ? call["call"].get<std::string>()
                               : "";
  if (kind == "tools_list") return answer_tools_list(run);
  if (kind == "checkpoint" || kind == "restore")
    return answer_checkpoint(run, kind, call, keep, max_bytes);
  if (kind == "save_skill") return answer_save_skill(call, keep);
  if (kind == "tool_call") return answer_tool_call(run, call, code, max_bytes);
  if (kind == "submit_result") {
    code.submitted = call.contains("value") ? call["value"] : Json(nullptr);
    if (run.services) run.services->submit_result(*code.submitted, code.id);
    return Json{{"ok", true}, {"value", nullptr}};
  }
  const std::shared_ptr<RunServices>& services = run.services;
  if (!services || !services->can_query()) return Json{{"ok", false}, {"deferred", true}};
  auto failure = [](const Error& e) {
    return Json{{"ok", false}, {"error", e.describe()}, {"budget", e.code == ErrorCode::Limit}};
  };
  auto model = [&]() -> std::optional<std::string> {
    if (call.contains("model") && call["model"].is_string())
      return call["model"].get<std::string>();
    return std::nullopt;
  };
  try {
    if (kind == "llm_query") {
      auto text = services->llm_query(call.at("prompt").get<std::string>(), model());
      return text ? Json{{"ok", true}, {"value", *text}} : failure(text.error());
    }
    if (kind == "llm_query_batched") {
      auto results =
          services->llm_query_batched(call.at("prompts").get<std::vector<std::string>>(), model());
      Json values = Json::array();
      for (auto& r : results) {
        values.push_back(r ? Json(*r)
                           : Json{{"error", r.error().describe()},
                                  {"budget", r.error().code == ErrorCode::Limit}});
      }
      return Json{{"ok", true}, {"value", std::move(values)}};
    }
    if (kind == "rlm_query") {
      std::optional<std::string> sub_context;
      if (call.contains("context") && call["context"].is_string())
        sub_context = call["context"].get<std::string>();
      auto text = services->rlm_query(call.at("prompt").get<std::string>(), sub_context);
      return text ? Json{{"ok", true}, {"value", *text}} : failure(text.error());
    }
  } catch (const Json::exception& e) {
    return Json{{"ok", false}, {"error", std::string("bad ") + kind + " call: " + e.what()}};
  }
  return Json{{"ok", false}, {"error", "unknown call '" + kind + "'"}};
}

// Tells the run's services which code run the callbacks come from while it lasts, so sub-queries
// it starts are recorded as its children.
class CodeRunScope {
 public:
  CodeRunScope(const RunHandles& run, const std::string& id) : services_(run.services.get()) {
    if (services_ != nullptr) services_->set_code_run(id);
  }
  ~CodeRunScope() {
    if (services_ != nullptr) services_->set_code_run({});
  }
  CodeRunScope(const CodeRunScope&) = delete;
  CodeRunScope& operator=(const CodeRunScope&) = delete;

 private:
  RunServices* services_;
};

// A worker and what the model should be told about its past.
struct Slot {
  std::mutex mutex;  // one call at a time per session
  std::unique_ptr<ReplSession> session;
  std::uint64_t serial = 0;  // counts the workers this slot has had
  std::string lost;          // why the previous worker's state was lost, told once to the next call
  Clock::time_point last_used = Clock::now();
  // The servers/ tree its worker imports (servers_tree.hpp): tree_base/v<n>, made again when the
  // run's tools change, removed with the slot.
  std::filesystem::path tree_base;
  std::filesystem::path tree_dir;
  std::uint64_t tree_fingerprint = 0;
  std::uint64_t tree_version = 0;
  std::uint64_t tree_told = 0;  // the serial of the worker that was told tree_dir
  std::string checkpoint;       // the last checkpoint() (pickled variables, base64), for restore()

  Slot() = default;
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
  ~Slot() {
    std::error_code ec;
    if (!tree_base.empty()) std::filesystem::remove_all(tree_base, ec);
  }
};

// The run's tools for code, minus the REPL's own (code already runs in it).
std::vector<ToolSpec> code_tools(RunServices& services) {
  std::vector<ToolSpec> out = services.tools();
  std::erase_if(out, [](const ToolSpec& spec) { return is_repl_tool(spec.name); });
  return out;
}

// A kernel-owned directory for the sessions' servers/ trees (0700, under the temporary
// directory): workers get it read-only. Empty when it can't be made (then there is no tree).
std::filesystem::path make_tree_root() {
  std::error_code ec;
  std::string pattern = (std::filesystem::temp_directory_path(ec) / "kernex-repl-XXXXXX").string();
  if (ec || ::mkdtemp(pattern.data()) == nullptr) {
    log(LogLevel::Warn, "toolbox-repl: no servers/ tree: cannot make a directory for it");
    return {};
  }
  return pattern;
}

class ReplToolbox final : public ToolExecutor, public SharedToolList {
 public:
  explicit ReplToolbox(ReplOptions options)
      : options_(std::move(options)),
        specs_(std::make_shared<const std::vector<ToolSpec>>(offered_specs(options_.tools))),
        tree_root_(make_tree_root()),
        pool_(options_.pool_size, options_.python, kStartupTimeout) {}

  ~ReplToolbox() override {
    std::error_code ec;
    if (!tree_root_.empty()) std::filesystem::remove_all(tree_root_, ec);
  }

  Result<std::vector<ToolSpec>> list_tools(const Context& context) override {
    if (!offer(context)) return std::vector<ToolSpec>{};
    return *specs_;
  }
  // The kernel's runs share this list instead of copying every schema each run.
  Result<std::shared_ptr<const std::vector<ToolSpec>>> list_tools_shared(
      const Context& context) override {
    if (!offer(context)) return nullptr;
    return specs_;
  }

  Result<ToolResult> execute(const Context& context, const RunHandles& run,
                             const ToolCall& call) override {
    if (context.stop.stop_requested()) return error_of(call, sandbox::cancelled_text(call.name));
    auto where = sandbox::call_workspace(sandbox::CallScope::of(context), options_.run.workspace);
    if (!where) return error_of(call, where.error().message);
    // Set by the host: workers are kept per workspace (and overlay layers), never shared with a
    // run that has others.
    if (!is_offered(call.name))
      return error_of(call, "toolbox-repl: " + call.name +
                                " is not offered here (the repl toolbox's `tools` option)");
    auto request = build_request(call, where->dir);
    if (!request) return error_of(call, request.error().message);
    auto& [line, raw] = *request;

    std::shared_ptr<Slot> slot = slot_for(session_key(run, *where));
    std::lock_guard lock(slot->mutex);
    slot->last_used = Clock::now();
    std::optional<std::string> taken_from;
    auto restarted = ensure_worker(*slot, run, *where, taken_from);
    if (!restarted) return error_of(call, restarted.error());
    // The pool refills what this call took once it returns, not while its code and tools run.
    const WorkerPool::Taken taken(pool_, std::move(taken_from));

    const std::optional<std::string> tenant = tenant_of(context);
    if (call.name == "eval_code") sync_servers(*slot, run, tenant, context.stop);

    CodeRun code;
    code.id = next_code_run_id(run);
    const auto began = Clock::now();
    const CodeRunScope in_code(run, code.id);
    auto reply = slot->session->request(
        call.name, std::move(line), raw, options_.timeout,
        [&run, &code, &slot, &tenant, this](Json& c) {
          return answer_call(run, c, code, options_.tool_result_max_bytes,
                             Keeping{options_.data_dir, tenant, slot->checkpoint});
        },
        context.stop);
    const double wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - began).count();
    if (!reply && reply.error().code == ErrorCode::Cancelled) {
      Json body = {{"error", sandbox::cancelled_text(call.name) + "; the REPL's state is lost"},
                   {"cancelled", true},
                   {"state_lost", true},
                   {"wall_ms", wall_ms}};
      return worker_lost(*slot, run, call, code,
                         "the run was cancelled while " + call.name + " ran", std::move(body));
    }
    if (reply && call.name == "eval_code" && restarted->empty() && !code.submitted) {
      if (auto fast = eval_content(*reply, wall_ms)) {
        if (run.trajectory) record_code_run(run, call, code, parse_untrusted(fast->content));
        return ToolResult{call.id, call.name, std::move(fast->content), fast->is_error};
      }
    }
    auto parsed =
        reply ? slot->session->parse(*reply) : Result<Json>(std::unexpected(reply.error()));
    if (!parsed) {
      const bool timed_out = parsed.error().code == ErrorCode::Limit;
      std::string why = timed_out ? call.name + " timed out after " + seconds(options_.timeout)
                                  : parsed.error().message;
      Json body = {
          {"error",
           why +
               ". The REPL worker was stopped and its state (variables, definitions) is lost; the "
               "next call starts a fresh REPL."},
          {"state_lost", true},
          {"wall_ms", wall_ms}};
      if (timed_out) body["timed_out"] = true;
      return worker_lost(*slot, run, call, code, why, std::move(body));
    }
    return finish(run, call, code, std::move(*parsed), wall_ms, *restarted);
  }

 private:
  // The slot's worker, taken from the pool (or started) when it has none or a broken one. The
  // value: what the worker before it lost ("" when nothing was lost, or no worker is new).
  // `taken_from`: the pool's key, when it was asked for a worker.
  std::expected<std::string, std::string> ensure_worker(Slot& slot, const RunHandles& run,
                                                        const sandbox::CallWorkspace& where,
                                                        std::optional<std::string>& taken_from) {
    if (slot.session && !slot.session->broken()) return std::string();
    auto policy = policy_for(run.read_grants, where);
    if (!policy) return std::unexpected(policy.error().describe());
    taken_from = policy_key(run.read_grants, where);
    auto started = pool_.take_or_start(*taken_from, *policy);
    if (!started) return std::unexpected(started.error().describe());
    slot.session = std::move(*started);
    ++slot.serial;
    return std::exchange(slot.lost, "");
  }

  // The worker was stopped (cancelled, timed out, broken): the next call of this session starts a
  // fresh one and is told `lost`; this call's answer is `body`, an error.
  ToolResult worker_lost(Slot& slot, const RunHandles& run, const ToolCall& call,
                         const CodeRun& code, std::string lost, Json body) {
    slot.session.reset();
    slot.lost = std::move(lost);
    record_code_run(run, call, code, body);
    return result_of(call, std::move(body), true);
  }

  using Request =
      std::pair<std::string, std::string>;  // the request line, and raw bytes to follow it

  // Makes the slot's servers/ tree again when the run's tools changed (a skill activated), and
  // tells a worker that has not seen it where it is. Without it code still has tools.call.
  void sync_servers(Slot& slot, const RunHandles& run, const std::optional<std::string>& tenant,
                    std::stop_token stop) {
    if (tree_root_.empty() || !run.services) return;
    const std::vector<ToolSpec> tools = code_tools(*run.services);
    // Made again too when the tenant's saved skills may have changed (a later turn of the session
    // imports a skill trusted meanwhile).
    std::uint64_t fingerprint = tools_fingerprint(tools);
    if (!options_.data_dir.empty() && tenant)
      fingerprint ^= saved_skills_fingerprint(options_.data_dir / "repl-skills" / *tenant,
                                              options_.data_dir / skills::kTrustFileName) *
                     0x9E3779B97F4A7C15ull;
    std::error_code ec;
    if (slot.tree_dir.empty() || fingerprint != slot.tree_fingerprint) {
      if (slot.tree_base.empty())
        slot.tree_base = tree_root_ / ("s" + std::to_string(trees_made_.fetch_add(1) + 1));
      std::filesystem::create_directories(slot.tree_base, ec);
      const auto next = slot.tree_base / ("v" + std::to_string(++slot.tree_version));
      if (auto written = write_servers_tree(next, tools); !written) {
        log(LogLevel::Warn, "toolbox-repl: servers/ tree not made: " + written.error().describe());
        return;
      }
      add_saved_skills(next, tenant);
      if (!slot.tree_dir.empty()) std::filesystem::remove_all(slot.tree_dir, ec);
      slot.tree_dir = next;
      slot.tree_fingerprint = fingerprint;
      slot.tree_told = 0;
    }
    if (slot.tree_told == slot.serial) return;
    auto told = slot.session->request(
        "servers", line_of(Json{{"op", "servers"}, {"dir", slot.tree_dir.string()}}), {},
        options_.timeout,
        [](const Json&) {
          return Json{{"ok", false}, {"error", "not now"}};
        },
        stop);
    if (told) slot.tree_told = slot.serial;
  }

  // The tenant's trusted saved skills as the package `skills` beside servers/.
  void add_saved_skills(const std::filesystem::path& tree,
                        const std::optional<std::string>& tenant) const {
    if (options_.data_dir.empty() || !tenant) return;
    // Read only: a run that saves nothing leaves the data dir as it was.
    const std::filesystem::path area = options_.data_dir / "repl-skills" / *tenant;
    auto written =
        tenant->empty() || tenant->front() == '.'
            ? Result<void>(fail(ErrorCode::Tool, "no skills area for tenant '" + *tenant + "'"))
            : write_skills_package(tree, area, options_.data_dir / skills::kTrustFileName);
    if (!written)
      log(LogLevel::Warn, "toolbox-repl: saved skills not offered: " + written.error().describe());
  }

  // Workers are started once the tools are offered, so a kernel that loads the plugin but never
  // offers it (every toolbox found, by default) starts none: for this workspace, without grants,
  // in the background (policy and all).
  bool offer(const Context& context) {
    if (!offered(context)) return false;
    sandbox::CallWorkspace where;
    if (context.workspace) {
      where = {context.workspace->lexically_normal(), true, context.workspace_layers};
    }
    pool_.prewarm(policy_key({}, where), [this, where] { return policy_for({}, where); });
    return true;
  }

  bool is_offered(const std::string& name) const {
    return std::any_of(specs_->begin(), specs_->end(),
                       [&](const ToolSpec& spec) { return spec.name == name; });
  }

  // Always, or opt-in per run: when the run's allowed tools name one of them (kernex rlm does).
  bool offered(const Context& context) const {
    if (options_.offer_always) return true;
    if (!context.allowed_tools) return false;
    return std::any_of(specs_->begin(), specs_->end(), [&](const ToolSpec& spec) {
      return std::find(context.allowed_tools->begin(), context.allowed_tools->end(), spec.name) !=
             context.allowed_tools->end();
    });
  }

  static std::string line_of(const Json& request) {
    return request.dump(-1, ' ', false, Json::error_handler_t::replace) + '\n';
  }

  static std::string seconds(std::chrono::milliseconds d) {
    std::string s = std::to_string(static_cast<double>(d.count()) / 1000.0);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s + " s";
  }

  // The worker request for a tool call, with the raw bytes to follow it (load_context text).
  Result<Request> build_request(const ToolCall& call,
                                const std::filesystem::path& workspace) const {
    const Json& a = call.arguments;
    if (!a.is_object()) return fail(ErrorCode::Tool, call.name + ": arguments must be an object");
    auto str = [&](const char* key, bool required) -> Result<std::optional<std::string>> {
      if (!a.contains(key)) {
        if (required)
          return fail(ErrorCode::Tool, call.name + ": missing `" + key + "` (a string)");
        return std::optional<std::string>{};
      }
      if (!a[key].is_string())
        return fail(ErrorCode::Tool, call.name + ": `" + key + "` must be a string");
      return std::optional<std::string>(a[key].get<std::string>());
    };
    auto integer = [&](const char* key) -> Result<Json> {
      if (!a.contains(key) || a[key].is_null()) return Json(nullptr);
      if (!a[key].is_number_integer())
        return fail(ErrorCode::Tool, call.name + ": `" + key + "` must be an integer");
      return a[key];
    };
    if (call.name == "load_context") {
      auto name = str("name", true);
      auto text = str("text", false);
      auto file = str("file", false);
      for (auto* r : {&name, &text, &file}) {
        if (!*r) return std::unexpected(r->error());
      }
      if (!is_identifier(**name))
        return fail(ErrorCode::Tool, "load_context: `name` must be a Python identifier");
      if (text->has_value() == file->has_value())
        return fail(ErrorCode::Tool, "load_context: give exactly one of `text` or `file`");
      if (*text) {
        Json req = {{"op", "load"}, {"name", **name}, {"nbytes", (*text)->size()}};
        req["source"] =
            a.contains("source") && a["source"].is_string() ? a["source"] : Json("text");
        return Request{line_of(req), **text};
      }
      std::filesystem::path path(**file);
      // Relative to the workspace; the worker opens it inside the sandbox, which decides what is
      // readable.
      if (path.is_relative()) path = workspace / path;
      return Request{
          line_of(
              Json{{"op", "load"}, {"name", **name}, {"file", path.lexically_normal().string()}}),
          {}};
    }
    if (call.name == "list_vars") return Request{line_of(Json{{"op", "list"}}), {}};
    if (call.name == "peek") {
      KERNEX_ASSIGN_OR_RETURN(auto name, str("name", true));
      KERNEX_ASSIGN_OR_RETURN(auto start, integer("start"));
      KERNEX_ASSIGN_OR_RETURN(auto end, integer("end"));
      return Request{line_of(Json{{"op", "peek"}, {"name", *name}, {"start", start}, {"end", end}}),
                     {}};
    }
    if (call.name == "scan") {
      KERNEX_ASSIGN_OR_RETURN(auto name, str("name", true));
      KERNEX_ASSIGN_OR_RETURN(auto pattern, str("pattern", true));
      KERNEX_ASSIGN_OR_RETURN(auto hits, integer("max_hits"));
      return Request{
          line_of(Json{{"op", "scan"}, {"name", *name}, {"pattern", *pattern}, {"max_hits", hits}}),
          {}};
    }
    if (call.name == "eval_code") {
      KERNEX_ASSIGN_OR_RETURN(auto code, str("code", true));
      return Request{eval_request_line(*code), {}};
    }
    if (call.name == "provide_answers") {
      if (!a.contains("answers") || !a["answers"].is_object()) {
        return fail(ErrorCode::Tool,
                    "provide_answers: `answers` must be an object {query_id: text}");
      }
      for (const auto& [id, text] : a["answers"].items()) {
        if (!text.is_string())
          return fail(ErrorCode::Tool,
                      "provide_answers: the answer to `" + id + "` must be a string");
      }
      return Request{line_of(Json{{"op", "answers"}, {"answers", a["answers"]}}), {}};
    }
    return fail(ErrorCode::Tool, "toolbox-repl: no tool named '" + call.name + "'");
  }

  ToolResult finish(const RunHandles& run, const ToolCall& call, const CodeRun& code, Json reply,
                    double wall_ms, const std::string& restarted) {
    // The reply comes from sandboxed code: any field may hold any type, and none may throw here.
    if (!reply.is_object() || reply.find("ok") == reply.end() || reply["ok"] != true) {
      const bool said = reply.is_object() && reply.contains("error") && reply["error"].is_string();
      Json body = {{"error", said ? reply["error"] : Json("the REPL refused the request")}};
      if (!restarted.empty()) add_restart_note(body, restarted);
      return result_of(call, std::move(body), true);
    }
    Json value = reply.contains("value") ? std::move(reply["value"]) : Json::object();
    if (!value.is_object()) value = Json{{"value", std::move(value)}};
    bool is_error = false;
    if (call.name == "eval_code") {
      // Only the worker's own fields: the rest (wall_ms, state_lost, note, ...) are the kernel's to
      // set.
      for (auto it = value.begin(); it != value.end();) {
        const bool known =
            is_eval_field(it.key()) || it.key() == "stdout_dropped" || it.key() == "stderr_dropped";
        it = known ? std::next(it) : value.erase(it);
      }
      for (const char* stream : {"stdout", "stderr"}) {
        const std::string dropped_key = std::string(stream) + "_dropped";
        const auto dropped = unsigned_field(value, dropped_key);
        if (dropped > 0 && value.contains(stream) && value[stream].is_string()) {
          value[stream] = value[stream].get<std::string>() + sandbox::truncation_marker(dropped);
        }
        value.erase(dropped_key);
      }
      value["wall_ms"] = wall_ms;
      is_error = value.contains("error");
      if (!restarted.empty()) add_restart_note(value, restarted);
      // A host with a run carries the result itself; one without (mcp serve) gets it here.
      if (code.submitted) {
        if (run.services) {
          value["result_submitted"] = true;
        } else {
          value["result"] = *code.submitted;
        }
      }
      record_code_run(run, call, code, value);
    } else if (call.name == "peek" && unsigned_field(value, "dropped") > 0 &&
               value.contains("text") && value["text"].is_string()) {
      value["text"] = value["text"].get<std::string>() +
                      sandbox::truncation_marker(unsigned_field(value, "dropped"));
    } else if (!restarted.empty()) {
      add_restart_note(value, restarted);
    }
    if (call.name == "peek") value.erase("dropped");
    return result_of(call, std::move(value), is_error);
  }

  static std::size_t unsigned_field(const Json& object, const std::string& key) {
    const auto it = object.find(key);
    return it != object.end() && it->is_number_unsigned() ? it->get<std::size_t>() : 0;
  }

  static void add_restart_note(Json& body, const std::string& why) {
    body["state_lost"] = true;
    body["note"] = "this call ran in a fresh REPL: the previous worker stopped (" + why +
                   ") and its variables and definitions were lost";
  }

  void record_code_run(const RunHandles& run, const ToolCall& call, const CodeRun& code,
                       const Json& body) const {
    if (!run.trajectory) return;
    const bool has_code = call.arguments.is_object() && call.arguments.contains("code");
    Json event = {{"code", has_code ? call.arguments["code"] : Json("")}, {"id", code.id}};
    if (code.tool_calls > 0) event["tool_calls"] = code.tool_calls;
    if (run.services) {
      event["span"] = run.services->span();
      event["depth"] = run.services->depth();
      event["session"] = run.services->session();
    }
    for (const char* key : {"stdout", "stderr", "error", "wall_ms", "cpu_ms", "peak_rss_kb",
                            "state_lost", "timed_out", "pending_queries"}) {
      if (body.contains(key)) event[key] = body[key];
    }
    run.trajectory->record("code_run", std::move(event));
  }

  // Names a code run in the trajectory (the parent of the tools it calls): unique in the run.
  std::string next_code_run_id(const RunHandles& run) {
    const std::string span = run.services ? run.services->span() : std::string("0");
    return span + "/code" + std::to_string(code_runs_.fetch_add(1) + 1);
  }

  // Outside a run (no services) every call shares one "local" REPL per workspace.
  static std::string session_key(const RunHandles& run, const sandbox::CallWorkspace& where) {
    std::string key =
        run.services ? run.services->session() + "/" + run.services->span() : std::string("/local");
    return key + where.key();
  }

  std::shared_ptr<Slot> slot_for(const std::string& key) {
    std::lock_guard lock(mutex_);
    auto& slot = slots_[key];
    if (!slot) {
      slot = std::make_shared<Slot>();
      evict_beyond_limit(key);
    }
    return slot;
  }

  // Stops the least recently used idle workers past max_sessions (a busy one is never stopped:
  // its mutex is held, e.g. by a parent run waiting on rlm_query).
  void evict_beyond_limit(const std::string& keep) {
    while (slots_.size() > options_.max_sessions) {
      auto victim = slots_.end();
      for (auto it = slots_.begin(); it != slots_.end(); ++it) {
        if (it->first == keep) continue;
        if (victim == slots_.end() || it->second->last_used < victim->second->last_used)
          victim = it;
      }
      if (victim == slots_.end()) return;
      std::unique_lock busy(victim->second->mutex, std::try_to_lock);
      if (!busy.owns_lock()) return;
      victim->second->session.reset();
      busy.unlock();
      slots_.erase(victim);
    }
  }

  // Names a worker's sandbox: its workspace (with its overlay layers) and read grants (in any
  // order).
  static std::string policy_key(std::vector<std::string> grants,
                                const sandbox::CallWorkspace& where) {
    std::sort(grants.begin(), grants.end());
    std::string key = where.host ? where.key() + '\n' : std::string();
    for (const auto& g : grants) key += g + '\n';
    return key;
  }

  Result<std::shared_ptr<const sandbox::Policy>> policy_for(std::vector<std::string> grants,
                                                            const sandbox::CallWorkspace& where) {
    constexpr std::size_t kMaxPolicies = 256;  // many sessions' workspaces: bounded, dropped whole
    std::sort(grants.begin(), grants.end());
    const std::string key = policy_key(grants, where);
    std::lock_guard lock(mutex_);
    if (auto it = policies_.find(key); it != policies_.end()) return it->second;
    sandbox::SandboxProfile profile = options_.profile(grants, where);
    if (!tree_root_.empty()) profile.read_only.push_back(tree_root_);  // servers/ trees
    auto built = sandbox::PolicyBuilder(std::move(profile)).Build();
    if (!built)
      return fail(ErrorCode::Sandbox, "toolbox-repl: the worker's sandbox cannot be built",
                  built.error());
    auto policy = std::make_shared<const sandbox::Policy>(std::move(*built));
    if (policies_.size() >= kMaxPolicies) policies_.clear();
    policies_.emplace(key, policy);
    return policy;
  }

  ReplOptions options_;
  const std::shared_ptr<const std::vector<ToolSpec>> specs_;  // built once, never changed
  std::filesystem::path tree_root_;  // kernel-owned, read-only to workers; empty: no trees
  std::atomic<std::uint64_t> trees_made_{0};
  std::atomic<std::uint64_t> code_runs_{0};
  std::mutex mutex_;  // guards slots_ and policies_, never held during a call
  std::map<std::string, std::shared_ptr<Slot>> slots_;
  std::map<std::string, std::shared_ptr<const sandbox::Policy>> policies_;
  WorkerPool pool_;  // last: its thread (which makes policies) stops before the rest goes
};

Result<std::shared_ptr<ToolExecutor>> make_repl_toolbox(const Json& config) {
  KERNEX_ASSIGN_OR_RETURN(auto options, ReplOptions::from_json(config));
  return std::make_shared<ReplToolbox>(std::move(options));
}

}  // namespace
}  // namespace kernex::repl

KERNEX_PLUGIN(Toolbox, "repl", "1.0.0",
              "A persistent sandboxed Python REPL with llm_query sub-calls (RLM)",
              kernex::repl::make_repl_toolbox)
