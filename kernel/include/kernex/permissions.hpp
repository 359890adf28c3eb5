// Allow/ask/deny rules on tool calls, kernex semantics plus approvals: deny first (first match
// wins), then ask (a match needs a person's approval), then a non-empty allow list must match.
// "Tool" or "Tool(glob)"; the glob ('*' only, ASCII case-insensitive) is matched against every
// string argument, nested ones included, joined by spaces in sorted key order and capped at 64 KiB.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"

namespace kernex {

struct PermissionOutcome {
  // False for a denied call and for one that needs approval (`ask`), so a host that cannot ask
  // a person refuses it.
  bool allowed = true;
  bool ask = false;  // allowed once a person approves
  // "denied by rule: <pattern>", "tool '<name>' not in allow list", "ask rule: <pattern>"
  std::string reason;
};

class PermissionRules {
 public:
  PermissionRules() = default;
  PermissionRules(std::vector<std::string> allow, std::vector<std::string> deny,
                  std::vector<std::string> ask = {})
      : allow_(std::move(allow)), deny_(std::move(deny)), ask_(std::move(ask)) {}

  // YAML file with optional `allow:`, `ask:` and `deny:` lists of strings; any other key is an
  // error.
  static Result<PermissionRules> load_yaml_file(const std::filesystem::path& path);
  static Result<PermissionRules> parse_yaml(std::string_view text, std::string_view origin);

  PermissionOutcome check(std::string_view tool_name, const Json& args) const;
  // For arguments a person approved (maybe edited): deny and allow apply, ask does not.
  PermissionOutcome check_approved(std::string_view tool_name, const Json& args) const;

  const std::vector<std::string>& allow() const { return allow_; }
  const std::vector<std::string>& deny() const { return deny_; }
  const std::vector<std::string>& ask() const { return ask_; }
  bool empty() const { return allow_.empty() && deny_.empty() && ask_.empty(); }

 private:
  PermissionOutcome check(std::string_view tool_name, const Json& args, bool with_ask) const;

  std::vector<std::string> allow_;
  std::vector<std::string> deny_;
  std::vector<std::string> ask_;
};

inline constexpr std::size_t kMaxPermissionArgsLen = 65536;

// Helpers exposed for tests and for hosts that want the same matching.
std::string extract_args_string(const Json& args);
bool glob_match(std::string_view glob, std::string_view text);
bool pattern_matches(std::string_view pattern, std::string_view tool_name, std::string_view args);

// Largest index <= max that is on a UTF-8 character boundary of s.
std::size_t floor_char_boundary(std::string_view s, std::size_t max);

}  // namespace kernex
