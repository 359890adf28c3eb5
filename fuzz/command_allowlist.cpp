// command_matches_allowlist against a reference written from its documented semantics (tool.hpp
// and the kernex core spec): an empty list allows all; an entry holding '/' must equal the command;
// any other entry must equal the command's basename, the text after its last '/' ("a/" -> "").
// Input: the command, then one entry a line. A disagreement traps.
#include <string>
#include <vector>

#include "fuzz.hpp"
#include "kernex/tool.hpp"

namespace {

bool reference_allows(const std::vector<std::string>& allowed, const std::string& command) {
  if (allowed.empty()) return true;
  std::string basename = command;
  for (std::size_t i = command.size(); i > 0; --i) {
    if (command[i - 1] == '/') {
      basename = command.substr(i);
      break;
    }
  }
  for (const std::string& entry : allowed) {
    bool has_slash = false;
    for (char c : entry) has_slash = has_slash || c == '/';
    if (has_slash ? entry == command : entry == basename) return true;
  }
  return false;
}

}  // namespace

KERNEX_FUZZ_TARGET(command_allowlist) {
  const std::string_view input = kernex::fuzz::text(data, size);
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start <= input.size()) {
    std::size_t end = input.find('\n', start);
    if (end == std::string_view::npos) end = input.size();
    lines.emplace_back(input.substr(start, end - start));
    start = end + 1;
  }
  const std::string command = lines.front();
  const std::vector<std::string> allowed(lines.begin() + 1, lines.end());
  if (kernex::command_matches_allowlist(allowed, command) != reference_allows(allowed, command))
    __builtin_trap();
  return 0;
}
