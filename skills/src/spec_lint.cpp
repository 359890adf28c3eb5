// Agent Skills conformance, judged the way the specification's reference validator
// (skills-ref) judges it, message for message.
#include <clocale>
#include <cwctype>
#include <locale.h>

#include <algorithm>
#include <set>

#include "kernex/skills/lint.hpp"
#include "node.hpp"
#include "text.hpp"

namespace fs = std::filesystem;

namespace kernex::skills {
namespace {

constexpr std::size_t kMaxNameLength = 64;
constexpr std::size_t kMaxDescriptionLength = 1024;
constexpr std::size_t kMaxCompatibilityLength = 500;
// Far above any real SKILL.md; only bounds memory.
constexpr std::size_t kMaxSpecFileBytes = 16 * 1024 * 1024;

const std::set<std::string> kAllowedFields = {"allowed-tools", "compatibility", "description",
                                              "license",       "metadata",      "name"};

// Unicode case and character classes from glibc's C.UTF-8 tables (Python's str.lower and
// str.isalnum in the reference), without touching the process locale.
class UnicodeCtype {
 public:
  UnicodeCtype() : locale_(newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr))) {}
  ~UnicodeCtype() {
    if (locale_ != static_cast<locale_t>(nullptr)) freelocale(locale_);
  }
  UnicodeCtype(const UnicodeCtype&) = delete;
  UnicodeCtype& operator=(const UnicodeCtype&) = delete;

  char32_t lower(char32_t c) const {
    if (c < 0x80 || locale_ == static_cast<locale_t>(nullptr))
      return c >= 'A' && c <= 'Z' ? c + 32 : c;
    return static_cast<char32_t>(towlower_l(static_cast<wint_t>(c), locale_));
  }
  bool alnum(char32_t c) const {
    if (c < 0x80 || locale_ == static_cast<locale_t>(nullptr)) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    }
    return iswalnum_l(static_cast<wint_t>(c), locale_) != 0;
  }

 private:
  locale_t locale_;
};

const UnicodeCtype& ctype() {
  static const UnicodeCtype instance;
  return instance;
}

// Python str.strip(): Unicode whitespace (the ASCII set covers real-world frontmatter).
std::string_view py_strip(std::string_view s) { return detail::trim(s); }

struct Finding {
  std::string message;
  int line = 0;
};

void validate_name(const detail::Node& node, const fs::path& folder, std::vector<Finding>& out) {
  if (node.kind != detail::Node::Kind::Scalar || py_strip(node.text).empty()) {
    out.push_back({"Field 'name' must be a non-empty string", node.line});
    return;
  }
  std::string name(py_strip(node.text));
  std::u32string cps = detail::decode_utf8(name);
  if (cps.size() > kMaxNameLength) {
    out.push_back({"Skill name '" + name + "' exceeds " + std::to_string(kMaxNameLength) +
                       " character limit (" + std::to_string(cps.size()) + " chars)",
                   node.line});
  }
  if (std::any_of(cps.begin(), cps.end(), [](char32_t c) { return ctype().lower(c) != c; })) {
    out.push_back({"Skill name '" + name + "' must be lowercase", node.line});
  }
  if (name.front() == '-' || name.back() == '-') {
    out.push_back({"Skill name cannot start or end with a hyphen", node.line});
  }
  if (name.find("--") != std::string::npos) {
    out.push_back({"Skill name cannot contain consecutive hyphens", node.line});
  }
  if (!std::all_of(cps.begin(), cps.end(),
                   [](char32_t c) { return c == '-' || ctype().alnum(c); })) {
    out.push_back(
        {"Skill name '" + name +
             "' contains invalid characters. Only letters, digits, and hyphens are allowed.",
         node.line});
  }
  std::string dir_name = folder.filename().string();
  if (dir_name != name) {
    out.push_back(
        {"Directory name '" + dir_name + "' must match skill name '" + name + "'", node.line});
  }
}

void validate_description(const detail::Node& node, std::vector<Finding>& out) {
  if (node.kind != detail::Node::Kind::Scalar || py_strip(node.text).empty()) {
    out.push_back({"Field 'description' must be a non-empty string", node.line});
    return;
  }
  std::size_t n = detail::code_points(node.text);
  if (n > kMaxDescriptionLength) {
    out.push_back({"Description exceeds " + std::to_string(kMaxDescriptionLength) +
                       " character limit (" + std::to_string(n) + " chars)",
                   node.line});
  }
}

void validate_compatibility(const detail::Node& node, std::vector<Finding>& out) {
  if (node.kind != detail::Node::Kind::Scalar) {
    out.push_back({"Field 'compatibility' must be a string", node.line});
    return;
  }
  std::size_t n = detail::code_points(node.text);
  if (n > kMaxCompatibilityLength) {
    out.push_back({"Compatibility exceeds " + std::to_string(kMaxCompatibilityLength) +
                       " character limit (" + std::to_string(n) + " chars)",
                   node.line});
  }
}

void validate_allowed_tools(const detail::Node& node, std::vector<Finding>& out) {
  if (node.kind == detail::Node::Kind::Scalar) return;
  if (node.kind == detail::Node::Kind::List) {
    bool all_strings = std::all_of(node.items.begin(), node.items.end(), [](const detail::Node& n) {
      return n.kind == detail::Node::Kind::Scalar;
    });
    if (!all_strings)
      out.push_back({"Field 'allowed-tools' list items must all be strings", node.line});
    return;
  }
  out.push_back({"Field 'allowed-tools' must be either a string or a list of strings", node.line});
}

// The folder's own name, also for "dir/" and "." (Path.name would be empty for ".").
fs::path named_folder(const fs::path& folder) {
  fs::path p = folder.lexically_normal();
  if (p.has_filename() && p.filename() != "." && p.filename() != "..") return p;
  if (!p.has_filename() && p.has_parent_path() && p.parent_path().has_filename())
    return p.parent_path();
  std::error_code ec;
  fs::path abs = fs::weakly_canonical(folder, ec);
  return ec ? p : abs;
}

std::vector<Finding> judge(const fs::path& folder, const fs::path& skill_md) {
  auto content = detail::read_file_capped(skill_md.string(), kMaxSpecFileBytes);
  if (!content.error.empty()) return {{"Cannot read SKILL.md: " + content.error, 0}};
  if (content.too_large) return {{"SKILL.md is larger than 16 MiB", 0}};
  if (auto bad = detail::invalid_utf8_at(content.text)) {
    return {{"SKILL.md is not valid UTF-8 (byte offset " + std::to_string(*bad) + ")",
             detail::line_of(content.text, *bad)}};
  }
  // Python's read_text() turns CRLF into LF but keeps a BOM, which then fails the "---" check.
  std::string text = detail::normalize_newlines(content.text, false);
  if (text.rfind("---", 0) != 0) return {{"SKILL.md must start with YAML frontmatter (---)", 1}};
  std::size_t close = text.find("---", 3);
  if (close == std::string::npos) return {{"SKILL.md frontmatter not properly closed with ---", 1}};
  std::string_view block = std::string_view(text).substr(3, close - 3);

  detail::ParseFailure failure;
  auto root = detail::parse_yaml(block, true, 1, failure);
  if (!root) {
    std::string where = failure.line > 0 ? " (line " + std::to_string(failure.line) + ", column " +
                                               std::to_string(failure.column + 1) + ")"
                                         : "";
    return {{"Invalid YAML in frontmatter: " + failure.message + where, failure.line}};
  }
  if (root->kind != detail::Node::Kind::Map)
    return {{"SKILL.md frontmatter must be a YAML mapping", 1}};

  std::vector<Finding> out;
  std::vector<std::string> extra;
  int extra_line = 0;
  for (const auto& [key, value] : root->entries) {
    if (!kAllowedFields.contains(key)) {
      extra.push_back(key);
      if (extra_line == 0) extra_line = value.line;
    }
  }
  if (!extra.empty()) {
    std::sort(extra.begin(), extra.end());
    out.push_back({"Unexpected fields in frontmatter: " + detail::join(extra) +
                       ". Only ['allowed-tools', 'compatibility', 'description', 'license', "
                       "'metadata', 'name'] are "
                       "allowed.",
                   extra_line});
  }
  if (const detail::Node* name = root->find("name"))
    validate_name(*name, named_folder(folder), out);
  else
    out.push_back({"Missing required field in frontmatter: name", 1});
  if (const detail::Node* d = root->find("description"))
    validate_description(*d, out);
  else
    out.push_back({"Missing required field in frontmatter: description", 1});
  if (const detail::Node* c = root->find("compatibility")) validate_compatibility(*c, out);
  if (const detail::Node* t = root->find("allowed-tools")) validate_allowed_tools(*t, out);
  return out;
}

}  // namespace

LintVerdict lint_spec(const fs::path& folder) {
  LintVerdict v;
  v.path = folder;
  std::vector<Finding> findings;
  std::error_code ec;
  fs::path skill_md;
  if (!fs::exists(folder, ec)) {
    findings.push_back({"Path does not exist: " + folder.string(), 0});
  } else if (!fs::is_directory(folder, ec)) {
    findings.push_back({"Not a directory: " + folder.string(), 0});
  } else {
    for (const char* name : {"SKILL.md", "skill.md"}) {
      if (fs::exists(folder / name, ec)) {
        skill_md = folder / name;
        break;
      }
    }
    if (skill_md.empty())
      findings.push_back({"Missing required file: SKILL.md", 0});
    else
      findings = judge(folder, skill_md);
  }
  v.valid = findings.empty();
  for (const auto& f : findings) {
    v.errors.push_back(f.message);
    v.diagnostics.push_back(
        {Severity::Error, skill_md.empty() ? folder : skill_md, f.line, "", f.message});
  }
  if (!findings.empty()) {
    v.message = findings.front().message;
    v.line = findings.front().line;
  }
  return v;
}

}  // namespace kernex::skills
