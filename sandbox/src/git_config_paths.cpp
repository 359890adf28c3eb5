#include "git_config_paths.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/files.hpp"

namespace kernex::sandbox {
namespace fs = std::filesystem;

namespace {

constexpr int kIncludeDepth = 5;
constexpr std::size_t kMaxConfigBytes = 1u << 20;

struct Entry {
  std::string section;  // lowercase, with the subsection after a '.' as written
  std::string key;      // lowercase
  std::string value;    // unquoted
};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// A value as git reads it: quotes removed, escapes applied, a comment outside quotes dropped,
// trailing blanks trimmed. `line` starts after the '='.
std::string unquote(std::string_view line) {
  std::string out;
  bool quoted = false;
  std::size_t keep = 0;  // length without trailing blanks outside quotes
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '"') {
      quoted = !quoted;
      continue;
    }
    if (!quoted && (c == '#' || c == ';')) break;
    if (c == '\\' && i + 1 < line.size()) {
      const char e = line[++i];
      out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
      keep = out.size();
      continue;
    }
    if (out.empty() && !quoted && (c == ' ' || c == '\t')) continue;
    out += c;
    if (quoted || (c != ' ' && c != '\t')) keep = out.size();
  }
  out.resize(keep);
  return out;
}

std::vector<Entry> parse(const std::string& text) {
  std::vector<Entry> out;
  std::string section;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    while (!line.empty() && line.back() == '\\' && pos < text.size()) {  // continued
      line.pop_back();
      end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      line += text.substr(pos, end - pos);
      pos = end + 1;
    }
    const std::size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    std::string_view rest = std::string_view(line).substr(first);
    if (rest.front() == '[') {
      const std::size_t close = rest.rfind(']');
      std::string_view head = rest.substr(1, close == std::string_view::npos ? 0 : close - 1);
      const std::size_t space = head.find_first_of(" \t");
      section = lower(head.substr(0, space));
      if (space != std::string_view::npos) section += "." + unquote(head.substr(space + 1));
      // A key may follow the header on the same line.
      rest = close == std::string_view::npos ? std::string_view() : rest.substr(close + 1);
      const std::size_t k = rest.find_first_not_of(" \t\r");
      if (k == std::string_view::npos) continue;
      rest = rest.substr(k);
    }
    if (rest.front() == '#' || rest.front() == ';') continue;
    const std::size_t eq = rest.find('=');
    std::string_view key = rest.substr(0, eq);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t' || key.back() == '\r'))
      key.remove_suffix(1);
    out.push_back({section, lower(key),
                   eq == std::string_view::npos ? std::string() : unquote(rest.substr(eq + 1))});
  }
  return out;
}

// `value` as a path: `~/` from $HOME, relative to `base`.
fs::path as_path(const std::string& value, const fs::path& base) {
  if (value.starts_with("~/")) {
    const char* home = std::getenv("HOME");
    return home != nullptr ? fs::path(home) / value.substr(2) : fs::path();
  }
  if (value.starts_with("%(prefix)/")) return {};
  const fs::path p(value);
  return p.is_absolute() ? p : base / p;
}

// The words of a command-valued key that name a file by path ("./x", "tools/conv.py" after an
// interpreter, "/abs/x"): over-approximated, every word with a '/'.
std::vector<std::string> programs_of(const std::string& command) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < command.size()) {
    const std::size_t start = command.find_first_not_of(" \t", pos);
    if (start == std::string::npos) break;
    std::size_t end = command.find_first_of(" \t", start);
    if (end == std::string::npos) end = command.size();
    std::string word = command.substr(start, end - start);
    pos = end;
    std::erase_if(word, [](char c) { return c == '"' || c == '\'' || c == '!'; });
    if (word.find('/') != std::string::npos) out.push_back(word);
  }
  return out;
}

bool names_a_program(const Entry& e) {
  static const std::set<std::string> core = {"fsmonitor", "sshcommand", "editor",
                                             "pager",     "askpass",    "gitproxy"};
  if (e.section == "core") return core.contains(e.key);
  const std::string top = e.section.substr(0, e.section.find('.'));
  static const std::set<std::string> tops = {
      "filter",   "diff",      "merge",      "credential", "gpg",       "sequence", "pager",
      "difftool", "mergetool", "uploadpack", "receive",    "sendemail", "alias"};
  return tops.contains(top) || e.key == "helper" || e.key == "program" || e.key == "cmd";
}

struct Collector {
  fs::path worktree;
  std::set<fs::path> seen_configs;
  std::vector<fs::path> out;

  void add(const fs::path& p) {
    if (p.empty()) return;
    std::error_code ec;
    const fs::path real = fs::canonical(p, ec);
    if (!ec) out.push_back(real);
  }

  void config(const fs::path& file, int depth) {
    if (depth > kIncludeDepth || !seen_configs.insert(file).second) return;
    auto text = read_regular_file_head(file, "git config", kMaxConfigBytes);
    if (!text) return;
    for (const auto& e : parse(*text)) {
      const bool include =
          (e.section == "include" || e.section.starts_with("includeif.")) && e.key == "path";
      if (include) {
        const fs::path inc = as_path(e.value, file.parent_path());
        add(inc);
        if (!inc.empty()) config(inc, depth + 1);
      } else if (e.section == "core" &&
                 (e.key == "hookspath" || e.key == "excludesfile" || e.key == "attributesfile")) {
        add(as_path(e.value, worktree));
      } else if (names_a_program(e)) {
        for (const auto& program : programs_of(e.value)) add(as_path(program, worktree));
      }
    }
  }
};

}  // namespace

std::vector<fs::path> git_trusted_paths(const fs::path& gitdir, const fs::path& worktree) {
  Collector c{worktree, {}, {}};
  for (const char* name : {"config", "config.worktree"}) c.config(gitdir / name, 0);
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(gitdir / "hooks", ec))) c.add(gitdir / "hooks");
  for (fs::directory_iterator it(gitdir / "hooks", ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code sec;
    if (fs::is_symlink(it->symlink_status(sec))) c.add(it->path());
  }
  std::sort(c.out.begin(), c.out.end());
  c.out.erase(std::unique(c.out.begin(), c.out.end()), c.out.end());
  return c.out;
}

}  // namespace kernex::sandbox
