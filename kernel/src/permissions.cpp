#include "kernex/permissions.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <vector>

#include "kernex/files.hpp"

namespace kernex {

std::size_t floor_char_boundary(std::string_view s, std::size_t max) {
  if (max >= s.size()) return s.size();
  std::size_t i = max;
  // Step back over UTF-8 continuation bytes (10xxxxxx) to the start of the character.
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

std::string extract_args_string(const Json& args) {
  std::string out;
  // Explicit stack instead of recursion: arguments come from the model and may nest deeply.
  std::vector<const Json*> stack{&args};
  while (!stack.empty() && out.size() < kMaxPermissionArgsLen) {
    const Json* node = stack.back();
    stack.pop_back();
    if (node->is_string()) {
      if (!out.empty()) out += ' ';
      const auto& s = node->get_ref<const std::string&>();
      // Anything past the cap is cut below; copying one byte beyond it is enough to find the
      // character boundary there, so don't copy megabytes just to drop them.
      const std::size_t room = kMaxPermissionArgsLen + 1 - out.size();
      out.append(s, 0, std::min(s.size(), room));
    } else if (node->is_array() || node->is_object()) {
      // Objects iterate in sorted key order (std::map), as serde_json's BTreeMap does.
      std::vector<const Json*> children;
      children.reserve(node->size());
      for (const Json& child : *node) children.push_back(&child);
      stack.insert(stack.end(), children.rbegin(), children.rend());
    }
  }
  if (out.size() > kMaxPermissionArgsLen)
    out.resize(floor_char_boundary(out, kMaxPermissionArgsLen));
  return out;
}

namespace {

char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool ascii_iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  }
  return true;
}

bool folded_equal(char a, char b) { return ascii_lower(a) == ascii_lower(b); }

// Where `needle` (non-empty) first occurs in `hay` at or after `from`, ASCII case-insensitively,
// or npos. Knuth-Morris-Pratt: linear in both, where a naive search is their product.
std::size_t find_folded(std::string_view hay, std::string_view needle, std::size_t from) {
  std::vector<std::size_t> border(needle.size(), 0);  // longest proper border of needle[0, i]
  for (std::size_t i = 1, k = 0; i < needle.size(); ++i) {
    while (k > 0 && !folded_equal(needle[i], needle[k])) k = border[k - 1];
    if (folded_equal(needle[i], needle[k])) ++k;
    border[i] = k;
  }
  for (std::size_t i = from, k = 0; i < hay.size(); ++i) {
    while (k > 0 && !folded_equal(hay[i], needle[k])) k = border[k - 1];
    if (folded_equal(hay[i], needle[k])) ++k;
    if (k == needle.size()) return i + 1 - k;
  }
  return std::string_view::npos;
}

}  // namespace

bool glob_match(std::string_view glob, std::string_view text) {
  // '*' is the only wildcard, so the literal pieces between stars must occur in order: the first
  // as a prefix, the last as a suffix, each one between at its leftmost place after the previous
  // (leftmost is never worse). That is linear in glob and text; backtracking to the last star
  // was their product, seconds for a 64 KiB argument string against a long rule. Byte-wise
  // comparison equals kernex's per-character comparison on valid UTF-8, since only ASCII letters
  // fold and literals align on lead bytes.
  const std::size_t first_star = glob.find('*');
  if (first_star == std::string_view::npos) return ascii_iequals(glob, text);
  const std::size_t last_star = glob.rfind('*');
  const std::string_view head = glob.substr(0, first_star);
  const std::string_view tail = glob.substr(last_star + 1);
  if (head.size() + tail.size() > text.size() ||
      !ascii_iequals(head, text.substr(0, head.size())) ||
      !ascii_iequals(tail, text.substr(text.size() - tail.size())))
    return false;
  const std::string_view middle = text.substr(0, text.size() - tail.size());
  std::size_t pos = head.size();
  for (std::size_t g = first_star + 1; g < last_star;) {
    const std::size_t star = glob.find('*', g);
    const std::string_view piece = glob.substr(g, star - g);
    g = star + 1;
    if (piece.empty()) continue;
    const std::size_t at = find_folded(middle, piece, pos);
    if (at == std::string_view::npos) return false;
    pos = at + piece.size();
  }
  return true;
}

bool pattern_matches(std::string_view pattern, std::string_view tool_name, std::string_view args) {
  const auto open = pattern.find('(');
  if (open != std::string_view::npos && pattern.ends_with(')')) {
    // No trimming: "Bash (git *)" names the tool "Bash " and never matches.
    const std::string_view tool = pattern.substr(0, open);
    const std::string_view glob = pattern.substr(open + 1, pattern.size() - open - 2);
    return ascii_iequals(tool, tool_name) && glob_match(glob, args);
  }
  return ascii_iequals(pattern, tool_name);
}

PermissionOutcome PermissionRules::check(std::string_view tool_name, const Json& args) const {
  return check(tool_name, args, true);
}

PermissionOutcome PermissionRules::check_approved(std::string_view tool_name,
                                                  const Json& args) const {
  return check(tool_name, args, false);
}

PermissionOutcome PermissionRules::check(std::string_view tool_name, const Json& args,
                                         bool with_ask) const {
  const std::string args_str = extract_args_string(args);
  for (const std::string& pattern : deny_) {
    if (pattern_matches(pattern, tool_name, args_str))
      return {false, false, "denied by rule: " + pattern};
  }
  for (const std::string& pattern : with_ask ? ask_ : std::vector<std::string>{}) {
    if (pattern_matches(pattern, tool_name, args_str)) return {false, true, "ask rule: " + pattern};
  }
  if (!allow_.empty()) {
    bool any = false;
    for (const std::string& pattern : allow_) {
      if (pattern_matches(pattern, tool_name, args_str)) {
        any = true;
        break;
      }
    }
    if (!any) return {false, false, "tool '" + std::string(tool_name) + "' not in allow list"};
  }
  return {true, false, ""};
}

namespace {

std::string at_line(std::string_view origin, const YAML::Mark& mark) {
  std::string out(origin);
  if (!mark.is_null() && mark.line >= 0) out += ":" + std::to_string(mark.line + 1);
  return out;
}

Result<std::vector<std::string>> read_pattern_list(const YAML::Node& node, const std::string& key,
                                                   std::string_view origin) {
  std::vector<std::string> out;
  if (node.IsNull()) return out;  // `deny:` with every entry commented out means none
  if (!node.IsSequence()) {
    return fail(ErrorCode::Config, at_line(origin, node.Mark()) + ": permissions key '" + key +
                                       "' must be a list of strings like [\"Bash(git *)\"]");
  }
  for (std::size_t i = 0; i < node.size(); ++i) {
    const YAML::Node item = node[i];
    if (!item.IsScalar()) {
      // yaml-cpp marks an empty item at the next token, so point at the list instead.
      const YAML::Mark mark = item.IsNull() ? node.Mark() : item.Mark();
      return fail(ErrorCode::Config, at_line(origin, mark) + ": permissions key '" + key +
                                         "' item " + std::to_string(i + 1) + " must be a string");
    }
    out.push_back(item.Scalar());
  }
  return out;
}

}  // namespace

Result<PermissionRules> PermissionRules::parse_yaml(std::string_view text,
                                                    std::string_view origin) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return fail(ErrorCode::Config,
                at_line(origin, e.mark) + ": invalid YAML in permissions file: " + e.msg);
  }
  if (!root || root.IsNull()) return PermissionRules{};
  if (!root.IsMap()) {
    return fail(ErrorCode::Config,
                at_line(origin, root.Mark()) +
                    ": permissions file must be a mapping with 'allow' and/or 'deny'");
  }
  PermissionRules rules;
  try {
    for (const auto& kv : root) {
      if (!kv.first.IsScalar()) {
        return fail(ErrorCode::Config,
                    at_line(origin, kv.first.Mark()) + ": permissions keys must be strings");
      }
      const std::string key = kv.first.Scalar();
      Result<std::vector<std::string>> list;
      if (key == "allow" || key == "ask" || key == "deny") {
        list = read_pattern_list(kv.second, key, origin);
      } else {
        return fail(ErrorCode::Config, at_line(origin, kv.first.Mark()) +
                                           ": unknown permissions key '" + key +
                                           "' (expected 'allow', 'ask' or 'deny')");
      }
      if (!list) return std::unexpected(list.error());
      (key == "allow" ? rules.allow_ : key == "ask" ? rules.ask_ : rules.deny_) = std::move(*list);
    }
  } catch (const YAML::Exception& e) {
    return fail(ErrorCode::Config, at_line(origin, e.mark) + ": " + e.msg);
  }
  return rules;
}

Result<PermissionRules> PermissionRules::load_yaml_file(const std::filesystem::path& path) {
  KERNEX_ASSIGN_OR_RETURN(auto text, read_regular_file(path, "permissions file"));
  return parse_yaml(text, path.string());
}

}  // namespace kernex
