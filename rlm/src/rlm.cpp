#include "kernex/rlm.hpp"

#include <cctype>
#include <regex>

#include "kernex/files.hpp"

namespace kernex {
namespace {

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

std::string variable_name(std::size_t index) {
  return index == 0 ? "context" : "context_" + std::to_string(index);
}

// A tool result as text for the prompt or the answer: eval_code answers JSON whose stdout is the
// value; anything else is used as it is.
std::string printed(const ToolResult& result) {
  Json j = parse_untrusted(result.content);
  if (j.is_object() && j.contains("stdout") && j["stdout"].is_string())
    return j["stdout"].get<std::string>();
  return result.content;
}

// A configuration whose toolboxes leave out `repl` has no load_context: say what to add.
std::string missing_repl_hint(const ToolResult& result) {
  if (!result.content.starts_with("Unknown tool: load_context")) return "";
  return " (the rlm tools come from the `repl` toolbox: add it to `toolboxes:`, e.g. "
         "`toolboxes: [repl, files]`)";
}

// Loads every context into the REPL and tells the model what it holds (metadata only).
Result<void> load_contexts(Context& context, const RunOptions::ToolCaller& call_tool,
                           const RlmOptions& options) {
  std::string listing;
  std::size_t index = 0;
  auto load = [&](Json arguments, const std::string& origin) -> Result<void> {
    const std::string name = variable_name(index++);
    arguments["name"] = name;
    ToolResult loaded = call_tool("load_context", std::move(arguments));
    if (loaded.is_error)
      return fail(ErrorCode::Tool, "loading " + origin + " as `" + name +
                                       "` failed: " + loaded.content + missing_repl_hint(loaded));
    listing += "- `" + name + "` (from " + origin + "): " + loaded.content + "\n";
    return {};
  };
  for (const auto& file : options.context_files) {
    std::error_code ec;
    const auto absolute = std::filesystem::absolute(file, ec).lexically_normal();
    if (ec) return fail(ErrorCode::Usage, "context file " + file.string() + ": " + ec.message());
    // The REPL reads the file itself; a FIFO, device or directory is refused here, with an error
    // naming it, instead of hanging or confusing the sandboxed process.
    if (auto checked = open_regular_file(absolute, "context file"); !checked)
      return fail(ErrorCode::Usage, checked.error().message);
    if (auto r = load(Json{{"file", absolute.string()}}, file.string()); !r) return r;
  }
  for (const auto& text : options.context_texts) {
    if (auto r = load(Json{{"text", text}}, "the caller"); !r) return r;
  }
  context.system_prompt =
      rlm_system_prompt() + (context.system_prompt.empty() ? "" : "\n\n" + context.system_prompt);
  context.system_prompt +=
      listing.empty() ? "\n\nNo context variables are loaded; the question is all you have.\n"
                      : "\n\nVariables loaded in the REPL (metadata only):\n" + listing;
  return {};
}

Result<void> resolve_final(RunResult& run, const RunOptions::ToolCaller& call_tool) {
  auto final = parse_final(run.text);
  if (!final) return {};  // no FINAL: the model's last text stands
  if (!final->is_variable) {
    run.text = final->value;
    return {};
  }
  if (!is_identifier(final->value))
    return fail(ErrorCode::Tool, "FINAL_VAR(" + final->value + "): not a variable name");
  const std::string& v = final->value;
  ToolResult shown =
      call_tool("eval_code", Json{{"code", "_v = " + v +
                                               "\nprint(_v['content'] if isinstance(_v, dict) "
                                               "and 'content' in _v else _v, end='')"}});
  if (shown.is_error) return fail(ErrorCode::Tool, "FINAL_VAR(" + v + "): " + shown.content);
  Json j = parse_untrusted(shown.content);
  if (j.is_object() && j.contains("error") && !j["error"].is_null() && j["error"] != "") {
    return fail(ErrorCode::Tool, "FINAL_VAR(" + v + "): " + j["error"].dump());
  }
  run.text = printed(shown);
  return {};
}

}  // namespace

const std::vector<std::string>& rlm_tool_names() {
  static const std::vector<std::string> names{"load_context", "list_vars", "peek", "scan",
                                              "eval_code"};
  return names;
}

std::string rlm_system_prompt() {
  return R"(You answer a question about material that may be far too large to read at once. The material is not in this prompt: it is loaded as variables in a persistent Python REPL, and below you see only each variable's size, line count and type. Work on it with code instead of reading it.

Tools:
- eval_code(code): run Python in the REPL. Variables and functions persist between calls. What you print comes back to you (capped), so print summaries, counts and short excerpts, never whole variables.
- peek(name, start, end) and scan(name, pattern, max_hits): look at a slice of a variable, or search it with a regular expression, without writing code.
- list_vars(): what the REPL holds now.
Each context variable is a dict: content (the text), lines (a list of lines), line_count, size, type and metadata.

Inside eval_code you can call the model again on pieces of the material:
- llm_query(prompt, model=None) -> str: one completion, no tools. Use it to read, classify or summarise a chunk that is small enough to fit in a prompt.
- llm_query_batched(prompts, model=None) -> list[str]: many such completions at once; faster than a loop.
- rlm_query(prompt, context=None) -> str: hand a sub-problem, with its own context text, to a sub-agent that works the same way you do, one level deeper.
Every call counts against one budget of tokens, cost, tool calls and depth shared with your sub-calls. When it runs out the call raises an exception; stop spawning work and answer with what you have.

Method: first look at the shape of the data (sizes, a few lines, a scan for the terms the question names). Then narrow down with code: filter, count, split into chunks. Use llm_query only on pieces that need understanding rather than counting, and keep intermediate results in variables. Check a result with code before you rely on it.

When you are done, reply with no tool call and put the answer in FINAL(your answer), or, when the answer is in a REPL variable, FINAL_VAR(variable_name).)";
}

std::optional<FinalAnswer> parse_final(const std::string& text) {
  // The last FINAL wins: models sometimes restate the instructions before answering.
  static const std::regex final_var(R"(FINAL_VAR\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\))");
  std::optional<FinalAnswer> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), final_var);
       it != std::sregex_iterator(); ++it) {
    out = FinalAnswer{true, (*it)[1].str()};
  }
  if (out) return out;
  const auto pos = text.rfind("FINAL(");
  if (pos == std::string::npos) return std::nullopt;
  const auto close = text.rfind(')');
  if (close == std::string::npos || close < pos + 6) return std::nullopt;
  std::string value = text.substr(pos + 6, close - pos - 6);
  const auto first = value.find_first_not_of(" \t\r\n");
  const auto last = value.find_last_not_of(" \t\r\n");
  value = first == std::string::npos ? "" : value.substr(first, last - first + 1);
  return FinalAnswer{false, std::move(value)};
}

Result<RunResult> run_rlm(Kernel& kernel, const std::string& question, const RlmOptions& options) {
  RunOptions run = options.run;
  run.kind = "rlm";
  run.allowed_tools = rlm_tool_names();
  RunOptions sub_template =
      options.run;  // provider, model and sink carry down; budgets come from the tree
  sub_template.trajectory = nullptr;
  run.sub_runner = [&kernel, sub_template](
                       const std::string& prompt, const std::optional<std::string>& context,
                       const std::shared_ptr<RunServices>& parent) -> Result<std::string> {
    RlmOptions sub;
    sub.run = sub_template;
    sub.run.parent = parent;
    if (context) sub.context_texts.push_back(*context);
    KERNEX_ASSIGN_OR_RETURN(auto answered, run_rlm(kernel, prompt, sub));
    return answered.text;
  };
  // The host named these files, so the REPL's sandbox may read them even outside the workspace
  // (a path that cannot be made absolute fails in load_contexts).
  for (const auto& file : options.context_files) {
    std::error_code ec;
    const auto absolute = std::filesystem::absolute(file, ec).lexically_normal();
    if (!ec) run.read_grants.push_back(absolute.string());
  }
  run.before_loop = [&options](Context& context, const RunOptions::ToolCaller& call_tool) {
    return load_contexts(context, call_tool, options);
  };
  run.after_loop = [](RunResult& result, const RunOptions::ToolCaller& call_tool) {
    return resolve_final(result, call_tool);
  };
  return kernel.run(Request::from_text("rlm", question), run);
}

}  // namespace kernex
