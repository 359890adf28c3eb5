#include "manifest.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "text.hpp"

namespace kernex::skills::detail {
namespace {

bool has_control_chars(std::string_view s, bool allow_newlines) {
  for (unsigned char c : s) {
    if ((c < 0x20 && !(allow_newlines && (c == '\n' || c == '\t'))) || c == 0x7F) return true;
  }
  return false;
}

class Reader {
 public:
  Reader(const std::filesystem::path& file, std::vector<Diagnostic>& diagnostics)
      : file_(file), diagnostics_(diagnostics) {}

  void error(const Node& at, std::string field, std::string message) {
    diagnostics_.push_back({Severity::Error, file_, at.line, std::move(field), std::move(message)});
  }
  void warn(const Node& at, std::string field, std::string message) {
    diagnostics_.push_back(
        {Severity::Warning, file_, at.line, std::move(field), std::move(message)});
  }

  // A string. TOML numbers and booleans are refused; YAML plain scalars are strings already.
  std::optional<std::string> string(const Node& v, const std::string& field,
                                    std::string_view what) {
    if (v.kind != Node::Kind::Scalar) {
      error(
          v, field,
          "expected a string (" + std::string(what) + "), found " + std::string(describe_kind(v)));
      return std::nullopt;
    }
    return v.text;
  }

  std::optional<std::string> nonempty_string(const Node& v, const std::string& field,
                                             std::string_view what) {
    auto s = string(v, field, what);
    if (s && trim(*s).empty()) {
      error(v, field, "expected a non-empty string (" + std::string(what) + ")");
      return std::nullopt;
    }
    return s;
  }

  std::optional<bool> boolean(const Node& v, const std::string& field) {
    if (v.kind == Node::Kind::Bool) return v.boolean;
    if (v.kind == Node::Kind::Scalar && v.plain) {
      std::string s = ascii_lower(v.text);
      if (s == "true" || s == "yes") return true;
      if (s == "false" || s == "no") return false;
    }
    error(
        v, field,
        "expected true or false, found " +
            (v.kind == Node::Kind::Scalar ? "\"" + v.text + "\"" : std::string(describe_kind(v))));
    return std::nullopt;
  }

  // A list of strings; `single` also accepts one string as a one-item list.
  std::optional<std::vector<std::string>> strings(const Node& v, const std::string& field,
                                                  std::string_view what, bool single = false) {
    if (single && v.kind == Node::Kind::Scalar) return std::vector<std::string>{v.text};
    if (v.kind != Node::Kind::List) {
      error(v, field,
            "expected a list of strings (" + std::string(what) + "), found " +
                std::string(describe_kind(v)));
      return std::nullopt;
    }
    std::vector<std::string> out;
    bool ok = true;
    for (std::size_t i = 0; i < v.items.size(); ++i) {
      const Node& item = v.items[i];
      if (item.kind != Node::Kind::Scalar) {
        error(item, field + "[" + std::to_string(i) + "]",
              "expected a string (" + std::string(what) + "), found " +
                  std::string(describe_kind(item)));
        ok = false;
        continue;
      }
      out.push_back(item.text);
    }
    if (!ok) return std::nullopt;
    return out;
  }

  std::optional<std::map<std::string, std::string>> string_map(const Node& v,
                                                               const std::string& field,
                                                               std::string_view what) {
    if (v.kind != Node::Kind::Map) {
      error(v, field,
            "expected a mapping of NAME: value strings (" + std::string(what) + "), found " +
                std::string(describe_kind(v)));
      return std::nullopt;
    }
    std::map<std::string, std::string> out;
    bool ok = true;
    for (const auto& [k, value] : v.entries) {
      // Numbers and booleans are accepted as their text: `PORT = 8080` means "8080".
      if (value.kind == Node::Kind::Scalar || value.kind == Node::Kind::Int ||
          value.kind == Node::Kind::Float || value.kind == Node::Kind::Bool) {
        out[k] = value.text;
      } else {
        error(value, field + "." + k,
              "expected a string value, found " + std::string(describe_kind(value)));
        ok = false;
      }
    }
    if (!ok) return std::nullopt;
    return out;
  }

  bool expect_map(const Node& v, const std::string& field, std::string_view what) {
    if (v.kind == Node::Kind::Map) return true;
    error(v, field,
          "expected a mapping (" + std::string(what) + "), found " + std::string(describe_kind(v)));
    return false;
  }

  void unknown_keys(const Node& map, const std::string& prefix,
                    const std::set<std::string, std::less<>>& known) {
    for (const auto& [k, v] : map.entries) {
      if (known.contains(k)) continue;
      std::vector<std::string> names(known.begin(), known.end());
      warn(v, prefix.empty() ? k : prefix + "." + k,
           "unknown field, ignored (known fields: " + join(names) + ")");
    }
  }

  const std::filesystem::path& file() const { return file_; }

 private:
  const std::filesystem::path& file_;
  std::vector<Diagnostic>& diagnostics_;
};

std::vector<std::string> split_triggers(std::string_view s) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    std::size_t bar = s.find('|', pos);
    if (bar == std::string_view::npos) bar = s.size();
    std::string_view word = trim(s.substr(pos, bar - pos));
    if (!word.empty()) out.emplace_back(word);
    pos = bar + 1;
  }
  return out;
}

std::vector<std::string> split_whitespace(std::string_view s) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < s.size()) {
    while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos]))) ++pos;
    std::size_t end = pos;
    while (end < s.size() && !std::isspace(static_cast<unsigned char>(s[end]))) ++end;
    if (end > pos) out.emplace_back(s.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

// kernex/OpenClaw skills list their binaries as metadata.<vendor>.requires.bins.
std::vector<std::string> bins_from_metadata(const Json& j, int depth = 0) {
  if (depth > 8 || !j.is_object()) return {};
  auto req = j.find("requires");
  if (req != j.end() && req->is_object()) {
    auto bins = req->find("bins");
    if (bins != req->end() && bins->is_array()) {
      std::vector<std::string> out;
      for (const auto& b : *bins) {
        if (b.is_string()) out.push_back(b.get<std::string>());
      }
      return out;
    }
  }
  for (const auto& [k, v] : j.items()) {
    auto found = bins_from_metadata(v, depth + 1);
    if (!found.empty()) return found;
  }
  return {};
}

const std::set<std::string, std::less<>> kTopLevel = {
    "name",    "description", "license",  "compatibility", "metadata", "allowed-tools",
    "trigger", "triggers",    "requires", "homepage",      "version",  "model",
    "lazy",    "mcp",         "toolbox",  "permissions"};
const std::set<std::string, std::less<>> kToolboxKeys = {
    "description", "command",         "args",        "env", "network",
    "parameters",  "env_passthrough", "search_hints"};
const std::set<std::string, std::less<>> kMcpKeys = {"command", "args", "env"};
const std::set<std::string, std::less<>> kPermissionKeys = {"files", "network", "env", "commands"};

std::optional<Toolbox> read_toolbox(Reader& r, const std::string& name, const Node& v,
                                    const std::string& field) {
  if (!r.expect_map(v, field, "a toolbox: description, command, args, env, network, parameters"))
    return std::nullopt;
  Toolbox t;
  t.name = name;
  bool ok = true;
  if (name.empty() || has_control_chars(name, false)) {
    r.error(v, field, "expected a toolbox name without control characters");
    ok = false;
  }
  if (const Node* d = v.find("description")) {
    if (auto s =
            r.nonempty_string(*d, field + ".description", "what the tool does, shown to the model"))
      t.description = *s;
    else
      ok = false;
  } else {
    r.error(v, field + ".description",
            "missing required field; expected a string saying what the tool does");
    ok = false;
  }
  if (const Node* c = v.find("command")) {
    if (auto s = r.nonempty_string(*c, field + ".command", "the program to run"))
      t.command = *s;
    else
      ok = false;
  } else {
    r.error(v, field + ".command", "missing required field; expected the program to run");
    ok = false;
  }
  if (const Node* a = v.find("args")) {
    if (auto l = r.strings(*a, field + ".args", "program arguments"))
      t.args = *l;
    else
      ok = false;
  }
  if (const Node* e = v.find("env")) {
    if (auto m = r.string_map(*e, field + ".env", "environment variables set for the program"))
      t.env = *m;
    else
      ok = false;
  }
  if (const Node* n = v.find("network")) {
    if (auto b = r.boolean(*n, field + ".network"))
      t.network = *b;
    else
      ok = false;
  }
  if (const Node* p = v.find("parameters")) {
    if (p->kind != Node::Kind::Map) {
      r.error(*p, field + ".parameters",
              "expected a JSON Schema object for the tool's arguments, found " +
                  std::string(describe_kind(*p)));
      ok = false;
    } else {
      t.parameters = to_json(*p);
    }
  }
  if (const Node* e = v.find("env_passthrough")) {
    if (auto l = r.strings(*e, field + ".env_passthrough",
                           "names of environment variables passed from the parent")) {
      t.env_passthrough = *l;
    } else {
      ok = false;
    }
  }
  if (const Node* h = v.find("search_hints")) {
    if (auto l = r.strings(*h, field + ".search_hints", "keywords"))
      t.search_hints = *l;
    else
      ok = false;
  }
  r.unknown_keys(v, field, kToolboxKeys);
  if (!ok) return std::nullopt;
  return t;
}

std::optional<McpServer> read_mcp(Reader& r, const std::string& name, const Node& v,
                                  const std::string& field) {
  if (!r.expect_map(v, field, "an MCP server: command, args, env")) return std::nullopt;
  McpServer s;
  s.name = name;
  bool ok = true;
  if (name.empty() || has_control_chars(name, false)) {
    r.error(v, field, "expected a server name without control characters");
    ok = false;
  }
  if (const Node* c = v.find("command")) {
    if (auto str = r.nonempty_string(*c, field + ".command", "the program that runs the server"))
      s.command = *str;
    else
      ok = false;
  } else {
    r.error(v, field + ".command",
            "missing required field; expected the program that runs the server");
    ok = false;
  }
  if (const Node* a = v.find("args")) {
    if (auto l = r.strings(*a, field + ".args", "program arguments"))
      s.args = *l;
    else
      ok = false;
  }
  if (const Node* e = v.find("env")) {
    if (auto m = r.string_map(*e, field + ".env", "environment variables set for the server"))
      s.env = *m;
    else
      ok = false;
  }
  r.unknown_keys(v, field, kMcpKeys);
  if (!ok) return std::nullopt;
  return s;
}

// name, description and the optional strings (license, compatibility, homepage, model, version).
void read_identity(Reader& r, const Node& root, Skill& skill) {
  if (const Node* v = root.find("name")) {
    if (auto s = r.nonempty_string(*v, "name", "the skill's name")) {
      if (has_control_chars(*s, false))
        r.error(*v, "name", "expected a single-line name without control characters");
      else
        skill.name = std::string(trim(*s));
    }
  } else {
    r.error(root, "name", "missing required field; expected the skill's name");
  }
  if (const Node* v = root.find("description")) {
    if (auto s = r.nonempty_string(*v, "description", "what the skill does and when to use it")) {
      skill.description = std::string(trim(*s));
    }
  } else {
    r.error(root, "description",
            "missing required field; expected what the skill does and when to use it");
  }

  auto optional_string = [&](const char* key, std::optional<std::string>& out,
                             std::string_view what) {
    if (const Node* v = root.find(key)) {
      if (auto s = r.string(*v, key, what)) out = *s;
    }
  };
  optional_string("license", skill.license, "the licence name or file");
  optional_string("compatibility", skill.compatibility, "environment requirements");
  optional_string("homepage", skill.homepage, "a URL");
  optional_string("model", skill.model, "the model to use with this skill");
  if (const Node* v = root.find("version")) {
    // `version: 1.0` in YAML and `version = "1.0"` in TOML both mean the text "1.0".
    if (v->kind == Node::Kind::Int || v->kind == Node::Kind::Float)
      skill.version = v->text;
    else if (auto s = r.string(*v, "version", "the skill's version"))
      skill.version = *s;
  }
}

// metadata, allowed-tools, trigger(s), requires and lazy.
void read_activation(Reader& r, const Node& root, Skill& skill) {
  if (const Node* v = root.find("metadata")) {
    skill.metadata = to_json(*v);
  }
  if (const Node* v = root.find("allowed-tools")) {
    if (v->kind == Node::Kind::Scalar)
      skill.allowed_tools = split_whitespace(v->text);
    else if (auto l = r.strings(*v, "allowed-tools", "tool names, or one space-separated string"))
      skill.allowed_tools = *l;
  }

  for (const char* key : {"trigger", "triggers"}) {
    const Node* v = root.find(key);
    if (v == nullptr) continue;
    if (v->kind == Node::Kind::Scalar) {
      auto words = split_triggers(v->text);
      skill.triggers.insert(skill.triggers.end(), words.begin(), words.end());
    } else if (auto l = r.strings(*v, key, "trigger keywords, or one '|'-separated string")) {
      for (const auto& s : *l) {
        auto w = trim(s);
        if (!w.empty()) skill.triggers.emplace_back(w);
      }
    }
  }
  if (const Node* v = root.find("requires")) {
    if (auto l = r.strings(*v, "requires", "programs that must be on PATH", true))
      skill.requirements = *l;
  }
  if (skill.requirements.empty() && !skill.metadata.is_null())
    skill.requirements = bins_from_metadata(skill.metadata);
  if (const Node* v = root.find("lazy")) {
    if (auto b = r.boolean(*v, "lazy")) skill.lazy = *b;
  }
}

void read_permissions(Reader& r, const Node& root, Skill& skill, Manifest& manifest) {
  if (const Node* v = root.find("permissions")) {
    manifest.permissions_line = v->line;
    if (r.expect_map(*v, "permissions", "files, network, env, commands")) {
      auto list = [&](const char* key, std::vector<std::string>& out, std::string_view what) {
        if (const Node* l = v->find(key)) {
          if (auto s = r.strings(*l, std::string("permissions.") + key, what)) out = *s;
        }
      };
      list("files", skill.permissions.files, "\"read:PATH\", \"write:PATH\" or \"!PATH\"");
      list("network", skill.permissions.network, "host names");
      list("env", skill.permissions.env, "environment variable names");
      list("commands", skill.permissions.commands, "program names or absolute paths");
      r.unknown_keys(*v, "permissions", kPermissionKeys);
    }
  }
}

// The servers a skill declares: toolbox NAME, mcp NAME, and kernex's `mcp-NAME: command arg...`.
void read_servers(Reader& r, const Node& root, const std::filesystem::path& file,
                  Manifest& manifest) {
  if (const Node* v = root.find("toolbox")) {
    if (r.expect_map(*v, "toolbox", "toolbox NAME: {description, command, ...}")) {
      for (const auto& [name, entry] : v->entries) {
        std::string field = "toolbox." + name;
        if (auto t = read_toolbox(r, name, entry, field))
          manifest.toolboxes.push_back({*t, file, entry.line, field});
      }
    }
  }
  if (const Node* v = root.find("mcp")) {
    if (r.expect_map(*v, "mcp", "server NAME: {command, args, env}")) {
      for (const auto& [name, entry] : v->entries) {
        std::string field = "mcp." + name;
        if (auto s = read_mcp(r, name, entry, field))
          manifest.mcp_servers.push_back({*s, file, entry.line, field});
      }
    }
  }
  // kernex's YAML form: `mcp-NAME: command arg...`.
  for (const auto& [key, v] : root.entries) {
    if (key.rfind("mcp-", 0) != 0) continue;
    std::string name = key.substr(4);
    if (name.empty()) {
      r.error(v, key, "expected mcp-NAME with a server name");
      continue;
    }
    auto s = r.string(v, key, "the server command line: COMMAND ARG...");
    if (!s) continue;
    auto words = split_whitespace(*s);
    if (words.empty()) {
      r.error(v, key, "expected the server command line: COMMAND ARG...");
      continue;
    }
    McpServer server;
    server.name = name;
    server.command = words.front();
    server.args.assign(words.begin() + 1, words.end());
    manifest.mcp_servers.push_back({server, file, v.line, key});
  }
}

}  // namespace

Manifest read_frontmatter(const Node& root, const std::filesystem::path& file, Skill& skill,
                          std::vector<Diagnostic>& diagnostics) {
  Reader r(file, diagnostics);
  Manifest manifest;
  if (root.kind != Node::Kind::Map) {
    r.error(root, "",
            "expected the frontmatter to be a mapping of fields (name, description, ...), found " +
                std::string(describe_kind(root)));
    return manifest;
  }
  read_identity(r, root, skill);
  read_activation(r, root, skill);
  read_permissions(r, root, skill, manifest);
  read_servers(r, root, file, manifest);
  for (const auto& [key, v] : root.entries) {
    if (kTopLevel.contains(key) || key.rfind("mcp-", 0) == 0) continue;
    std::vector<std::string> names(kTopLevel.begin(), kTopLevel.end());
    r.warn(v, key, "unknown field, ignored (known fields: " + join(names) + ", mcp-NAME)");
  }
  return manifest;
}

std::vector<Declared<McpServer>> read_mcp_json(const Node& root, const std::filesystem::path& file,
                                               std::vector<Diagnostic>& diagnostics) {
  Reader r(file, diagnostics);
  std::vector<Declared<McpServer>> out;
  if (!r.expect_map(root, "", "a JSON object with \"mcpServers\"")) return out;
  const Node* servers = root.find("mcpServers");
  if (servers == nullptr) return out;
  if (!r.expect_map(*servers, "mcpServers", "server NAME: {command, args, env}")) return out;
  for (const auto& [name, entry] : servers->entries) {
    std::string field = "mcpServers." + name;
    if (auto s = read_mcp(r, name, entry, field)) out.push_back({*s, file, 0, field});
  }
  return out;
}

std::vector<Declared<Toolbox>> read_toolbox_json(const Node& root,
                                                 const std::filesystem::path& file,
                                                 std::vector<Diagnostic>& diagnostics) {
  Reader r(file, diagnostics);
  std::vector<Declared<Toolbox>> out;
  if (!r.expect_map(root, "", "a JSON object with \"toolboxes\"")) return out;
  const Node* boxes = root.find("toolboxes");
  if (boxes == nullptr) return out;
  if (!r.expect_map(*boxes, "toolboxes", "toolbox NAME: {description, command, ...}")) return out;
  for (const auto& [name, entry] : boxes->entries) {
    std::string field = "toolboxes." + name;
    if (auto t = read_toolbox(r, name, entry, field)) out.push_back({*t, file, 0, field});
  }
  return out;
}

}  // namespace kernex::skills::detail
