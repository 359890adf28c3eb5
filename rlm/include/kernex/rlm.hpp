// The recursive-language-model driver: large inputs live as variables in a sandboxed REPL (the
// toolbox-repl plugin), the model works on them with code and may call itself again on pieces
// (llm_query, rlm_query) within one budget, and answers with FINAL(answer) or FINAL_VAR(name).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/kernel.hpp"

namespace kernex {

struct RlmOptions {
  // Loaded as `context`, `context_1`, `context_2`, ... (dicts with content, lines, line_count,
  // size, type and metadata); the model sees their metadata, never their contents.
  std::vector<std::filesystem::path> context_files;
  // Texts loaded the same way after the files (rlm_query hands its `context` here).
  std::vector<std::string> context_texts;
  // Provider, model, budgets (they cover the whole tree), max_depth, sink, trajectory.
  RunOptions run;
};

// The REPL tools the root model is offered; every other tool is withheld from it.
const std::vector<std::string>& rlm_tool_names();

// The system prompt that teaches the method (written from the RLM paper's description).
std::string rlm_system_prompt();

// "FINAL(x)" -> x; "FINAL_VAR(name)" -> the variable's name (resolved through the REPL by
// run_rlm). None when the text holds neither.
struct FinalAnswer {
  bool is_variable = false;
  std::string value;
};
std::optional<FinalAnswer> parse_final(const std::string& text);

// Runs the question as an rlm run. The result's text is the final answer: FINAL's argument, a
// FINAL_VAR variable's value, or the model's last text when it gave neither.
Result<RunResult> run_rlm(Kernel& kernel, const std::string& question, const RlmOptions& options);

}  // namespace kernex
