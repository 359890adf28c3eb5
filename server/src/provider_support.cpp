#include "provider_support.hpp"

#include <algorithm>
#include <map>
#include <vector>

#include "kernex/generation.hpp"

namespace kernex::server {
namespace {

const std::map<std::string, std::vector<std::string>>& supported_fields() {
  static const std::map<std::string, std::vector<std::string>> table{
      {"openai",
       {"temperature", "top_p", "max_tokens", "stop", "seed", "presence_penalty",
        "frequency_penalty", "reasoning_effort", "response_format", "tool_choice",
        "parallel_tool_calls"}},
      {"anthropic",
       {"temperature", "top_p", "max_tokens", "stop", "tool_choice", "parallel_tool_calls"}},
      {"gemini",
       {"temperature", "top_p", "max_tokens", "stop", "seed", "presence_penalty",
        "frequency_penalty", "response_format", "tool_choice"}},
      {"ollama",
       {"temperature", "top_p", "max_tokens", "stop", "seed", "presence_penalty",
        "frequency_penalty", "response_format"}},
  };
  return table;
}

}  // namespace

Json generation_support_json(const std::string& provider) {
  const auto& table = supported_fields();
  auto it = table.find(provider);
  const std::vector<std::string> none;
  const auto& yes = it == table.end() ? none : it->second;
  Json supported = Json::array(), not_sent = Json::array();
  for (std::string_view field : kGenerationFields) {
    const bool has = std::find(yes.begin(), yes.end(), field) != yes.end();
    (has ? supported : not_sent).push_back(std::string(field));
  }
  const bool native = std::find(yes.begin(), yes.end(), "response_format") != yes.end();
  return {{"provider", provider},
          {"generation", {{"supported", supported}, {"not_sent", not_sent}}},
          {"response_format", native ? "native" : "kernel_checked"}};
}

}  // namespace kernex::server
