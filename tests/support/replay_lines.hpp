// Lines of replay provider scripts, and the environment a CLI suite runs bin/kernex in.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "cli_runner.hpp"
#include "kernex/json.hpp"

namespace kernex::testing {

inline std::string calculate_line(const std::string& id, const std::string& expression) {
  return Json{{"tool_calls",
               {{{"id", id}, {"name", "calculate"}, {"arguments", {{"expression", expression}}}}}}}
      .dump();
}

inline std::string text_line(const std::string& text) { return Json{{"text", text}}.dump(); }

// An eval_code call and a final answer, each with the usage a budgeted run counts.
inline std::string eval_code_line(const std::string& code, const std::string& id = "e1") {
  return Json{
      {"tool_calls", {{{"id", id}, {"name", "eval_code"}, {"arguments", {{"code", code}}}}}},
      {"usage", {{"input_tokens", 100}, {"output_tokens", 10}}}}
      .dump();
}
inline std::string answer_line(const std::string& text, int input_tokens = 100) {
  return Json{{"text", text}, {"usage", {{"input_tokens", input_tokens}, {"output_tokens", 10}}}}
      .dump();
}

// No config from the caller's shell, data under `dir`, only the build's plugins, a dumb terminal.
inline std::map<std::string, std::string> cli_environment(const std::filesystem::path& dir) {
  auto env = clean_environment();
  env["KERNEX_DATA_DIR"] = (dir / "data").string();
  env["KERNEX_PLUGIN_PATH"] = (dir / "no-plugins").string();
  env["TERM"] = "dumb";
  return env;
}

}  // namespace kernex::testing
