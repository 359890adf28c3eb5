// Small pure tools that run in-process: they touch no files, network or processes, so they
// need no sandbox. Script toolboxes from skills run through the sandboxed toolbox plugin.
// Config: `tools` (list of names to offer; default all).
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "kernex/plugin.hpp"

namespace {

using kernex::ErrorCode;
using kernex::Json;
using kernex::Result;
using kernex::ToolCall;
using kernex::ToolResult;

ToolResult ok(const ToolCall& c, std::string text) {
  return {c.id, c.name, std::move(text), false};
}
ToolResult bad(const ToolCall& c, std::string text) {
  return {c.id, c.name, std::move(text), true};
}

Result<std::string> string_arg(const Json& args, const char* name) {
  if (!args.is_object() || !args.contains(name) || !args.at(name).is_string()) {
    return kernex::fail(ErrorCode::Tool, std::string("argument `") + name + "` must be a string");
  }
  return args.at(name).get<std::string>();
}

ToolResult word_count(const ToolCall& call) {
  auto text = string_arg(call.arguments, "text");
  if (!text) return bad(call, text.error().message);
  std::size_t words = 0, lines = text->empty() ? 0 : 1, chars = 0;
  bool in_word = false;
  for (unsigned char ch : *text) {
    if ((ch & 0xC0) != 0x80) ++chars;  // count UTF-8 code points, not bytes
    if (ch == '\n') ++lines;
    const bool space = std::isspace(ch) != 0;
    if (!space && !in_word) ++words;
    in_word = !space;
  }
  if (!text->empty() && text->back() == '\n') --lines;
  return ok(call, Json{{"words", words}, {"lines", lines}, {"characters", chars}}.dump());
}

// Recursive descent over + - * / ^ and parentheses; depth-capped so hostile input can't
// exhaust the stack.
class Calculator {
 public:
  explicit Calculator(std::string_view s) : s_(s) {}
  Result<double> run() {
    auto v = expr(0);
    if (!v) return v;
    skip();
    if (pos_ != s_.size()) return error("unexpected '" + std::string(1, s_[pos_]) + "'");
    if (!std::isfinite(*v)) return error("result is not a finite number");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 64;
  Result<double> error(std::string what) {
    return kernex::fail(ErrorCode::Tool, "at character " + std::to_string(pos_ + 1) + ": " + what);
  }
  void skip() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skip();
    if (pos_ < s_.size() && s_[pos_] == c) return ++pos_, true;
    return false;
  }
  Result<double> expr(int depth) {
    auto left = term(depth);
    while (left) {
      if (eat('+')) {
        auto r = term(depth);
        if (!r) return r;
        *left += *r;
      } else if (eat('-')) {
        auto r = term(depth);
        if (!r) return r;
        *left -= *r;
      } else
        break;
    }
    return left;
  }
  Result<double> term(int depth) {
    auto left = power(depth);
    while (left) {
      if (eat('*')) {
        auto r = power(depth);
        if (!r) return r;
        *left *= *r;
      } else if (eat('/')) {
        auto r = power(depth);
        if (!r) return r;
        if (*r == 0) return error("division by zero");
        *left /= *r;
      } else
        break;
    }
    return left;
  }
  Result<double> power(int depth) {
    auto base = unary(depth);
    if (base && eat('^')) {
      auto exponent = power(depth + 1);
      if (!exponent) return exponent;
      if (depth > kMaxDepth) return error("expression nested too deeply");
      return std::pow(*base, *exponent);
    }
    return base;
  }
  Result<double> unary(int depth) {
    if (depth > kMaxDepth) return error("expression nested too deeply");
    if (eat('-')) {
      auto v = unary(depth + 1);
      if (v) *v = -*v;
      return v;
    }
    if (eat('+')) return unary(depth + 1);
    if (eat('(')) {
      auto v = expr(depth + 1);
      if (!v) return v;
      if (!eat(')')) return error("expected ')'");
      return v;
    }
    skip();
    const std::size_t start = pos_;
    while (pos_ < s_.size() &&
           (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '.'))
      ++pos_;
    if (start == pos_)
      return error(pos_ < s_.size() ? "expected a number" : "unexpected end of expression");
    std::istringstream in{std::string(s_.substr(start, pos_ - start))};
    double v = 0;
    if (!(in >> v) || !in.eof()) return error("malformed number");
    return v;
  }

  std::string_view s_;
  std::size_t pos_ = 0;
};

ToolResult calculate(const ToolCall& call) {
  auto expression = string_arg(call.arguments, "expression");
  if (!expression) return bad(call, expression.error().message);
  if (expression->size() > 4096) return bad(call, "expression longer than 4096 characters");
  auto value = Calculator(*expression).run();
  if (!value) return bad(call, value.error().message);
  std::ostringstream out;
  out.precision(15);
  out << *value;
  return ok(call, out.str());
}

struct Tool {
  kernex::ToolSpec spec;
  std::function<ToolResult(const ToolCall&)> run;
};

std::map<std::string, Tool> all_tools() {
  auto schema = [](const char* field, const char* what) {
    return Json{{"type", "object"},
                {"properties", {{field, {{"type", "string"}, {"description", what}}}}},
                {"required", {field}}};
  };
  std::map<std::string, Tool> tools;
  tools["word_count"] = {{"word_count",
                          "Counts the words, lines and characters of a text.",
                          schema("text", "The text to count"),
                          {"count", "words", "length"}},
                         word_count};
  tools["calculate"] = {{"calculate",
                         "Evaluates an arithmetic expression with + - * / ^ and parentheses.",
                         schema("expression", "For example (2 + 3) * 4"),
                         {"math", "arithmetic"}},
                        calculate};
  return tools;
}

class BuiltinToolbox final : public kernex::ToolExecutor, public kernex::SharedToolList {
 public:
  explicit BuiltinToolbox(std::map<std::string, Tool> tools)
      : tools_(std::move(tools)), specs_(specs_of(tools_)) {}

  Result<std::vector<kernex::ToolSpec>> list_tools(const kernex::Context&) override {
    return *specs_;
  }
  // The kernel's runs share this list instead of copying every schema each run.
  Result<std::shared_ptr<const std::vector<kernex::ToolSpec>>> list_tools_shared(
      const kernex::Context&) override {
    return specs_;
  }

  Result<ToolResult> execute(const kernex::Context&, const kernex::RunHandles&,
                             const ToolCall& call) override {
    auto it = tools_.find(call.name);
    if (it == tools_.end())
      return kernex::fail(ErrorCode::Tool, "builtin: no tool named " + call.name);
    return it->second.run(call);
  }

 private:
  static std::shared_ptr<const std::vector<kernex::ToolSpec>> specs_of(
      const std::map<std::string, Tool>& tools) {
    std::vector<kernex::ToolSpec> specs;
    for (const auto& [name, tool] : tools) specs.push_back(tool.spec);
    return std::make_shared<const std::vector<kernex::ToolSpec>>(std::move(specs));
  }

  std::map<std::string, Tool> tools_;
  const std::shared_ptr<const std::vector<kernex::ToolSpec>> specs_;  // built once, never changed
};

Result<std::shared_ptr<kernex::ToolExecutor>> make_builtin(const Json& config) {
  std::map<std::string, Tool> tools = all_tools();
  if (!config.is_object())
    return kernex::fail(ErrorCode::Config, "builtin: config must be an object");
  for (const auto& [key, value] : config.items()) {
    if (key != "tools")
      return kernex::fail(ErrorCode::Config,
                          "builtin: unknown option `" + key + "` (expected tools)");
  }
  if (config.contains("tools")) {
    const Json& wanted = config.at("tools");
    if (!wanted.is_array())
      return kernex::fail(ErrorCode::Config, "builtin: `tools` must be a list of tool names");
    std::map<std::string, Tool> chosen;
    for (const auto& name : wanted) {
      if (!name.is_string() || !tools.contains(name.get<std::string>())) {
        return kernex::fail(ErrorCode::Config, "builtin: unknown tool " + name.dump() +
                                                   " (have calculate, word_count)");
      }
      chosen.insert(*tools.find(name.get<std::string>()));
    }
    tools = std::move(chosen);
  }
  return std::make_shared<BuiltinToolbox>(std::move(tools));
}

}  // namespace

KERNEX_PLUGIN(Toolbox, "builtin", "1.0.0", "In-process pure tools: word_count, calculate",
              make_builtin)
