#include "manifest.hpp"

#include <algorithm>
#include <map>
#include <optional>

#include "manifest_schema.hpp"
#include "text.hpp"

namespace kernex::skills::detail {
namespace {

bool has_control_chars(std::string_view s, bool allow_newlines) {
  for (unsigned char c : s) {
    if ((c < 0x20 && !(allow_newlines && (c == '\n' || c == '\t'))) || c == 0x7F) return true;
  }
  return false;
}

// A value as the typed config reader sees it (kernex/config_fields.hpp), with the manifest's own
// typing: every YAML scalar is a string (`version: 1.0` is "1.0"), TOML numbers and booleans are
// not, and a plain true/yes/false/no (any case) is a boolean, as kernex's YAML skills took it.
config::FieldValue field_value(const Node& v) {
  // A list or mapping is shown by its kind: no need to convert its contents.
  config::FieldValue out = config::FieldValue::of(
      v.kind == Node::Kind::List ? Json::array()
                                 : (v.kind == Node::Kind::Map ? Json::object() : to_json(v)));
  if (v.kind == Node::Kind::Null) out.got = "nothing";
  if (v.kind != Node::Kind::Scalar) return out;
  out.json = v.text;
  out.text = v.text;
  out.got = config::FieldValue::of(Json(v.text)).got;
  if (v.plain) {
    const std::string word = ascii_lower(v.text);
    if (word == "true" || word == "yes") out.json = true;
    if (word == "false" || word == "no") out.json = false;
  }
  return out;
}

// Reads manifest values against their fields (manifest_schema.hpp) into Diagnostics naming the
// file, the line and the key path: the checks and wording are config_fields'; the field's doc
// says what was wanted. A manifest reports every problem rather than stopping at the first.
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

  // "expected X, got Y (doc)".
  void expected(const Node& v, const std::string& field, std::string_view what,
                const config::Field& f) {
    error(v, field,
          "expected " + std::string(what) + ", got " + field_value(v).got + " (" +
              std::string(f.doc) + ")");
  }

  std::optional<std::string> string(const Node& v, const std::string& field,
                                    const config::Field& f) {
    if (v.kind == Node::Kind::Null) {
      expected(v, field, "a string", f);
      return std::nullopt;
    }
    return checked(v, field, f, config::read_string(field_value(v), {}));
  }

  std::optional<std::string> nonempty_string(const Node& v, const std::string& field,
                                             const config::Field& f) {
    auto s = string(v, field, f);
    if (s && trim(*s).empty()) {
      expected(v, field, "a non-empty string", f);
      return std::nullopt;
    }
    return s;
  }

  std::optional<bool> boolean(const Node& v, const std::string& field, const config::Field& f) {
    if (v.kind == Node::Kind::Null) {
      expected(v, field, "true or false", f);
      return std::nullopt;
    }
    return checked(v, field, f, config::read_bool(field_value(v), {}));
  }

  // A list of strings; `single` also accepts one string as a one-item list.
  std::optional<std::vector<std::string>> strings(const Node& v, const std::string& field,
                                                  const config::Field& f, bool single = false) {
    if (single && v.kind == Node::Kind::Scalar) return std::vector<std::string>{v.text};
    if (v.kind != Node::Kind::List) {
      expected(v, field, "a list of strings", f);
      return std::nullopt;
    }
    std::vector<std::string> out;
    bool ok = true;
    for (std::size_t i = 0; i < v.items.size(); ++i) {
      auto item = string(v.items[i], field + "[" + std::to_string(i) + "]", f);
      if (item) out.push_back(std::move(*item));
      ok = ok && item.has_value();
    }
    if (!ok) return std::nullopt;
    return out;
  }

  std::optional<std::map<std::string, std::string>> string_map(const Node& v,
                                                               const std::string& field,
                                                               const config::Field& f) {
    if (v.kind != Node::Kind::Map) {
      expected(v, field, "a mapping of NAME: value strings", f);
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
        expected(value, field + "." + k, "a string value", f);
        ok = false;
      }
    }
    if (!ok) return std::nullopt;
    return out;
  }

  bool expect_map(const Node& v, const std::string& field, const config::Field& f) {
    if (v.kind == Node::Kind::Map) return true;
    expected(v, field, "a mapping", f);
    return false;
  }

  // Keys outside `section` are warnings (a newer manifest may carry them): config_fields words
  // them, with the known keys and the nearest one.
  void unknown_keys(const Node& map, const std::string& prefix, const config::Section& section,
                    bool mcp_prefix = false) {
    for (const auto& [k, v] : map.entries) {
      if (mcp_prefix && k.starts_with("mcp-")) continue;
      auto known = config::known_key(section, k, {});
      if (!known)
        warn(v, prefix.empty() ? k : prefix + "." + k, "ignored: " + known.error().message);
    }
  }

 private:
  template <class T>
  std::optional<T> checked(const Node& v, const std::string& field, const config::Field& f,
                           Result<std::optional<T>> read) {
    if (!read) {
      error(v, field, read.error().message + " (" + std::string(f.doc) + ")");
      return std::nullopt;
    }
    return *read;
  }

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

// A toolbox's or server's name: a key of the manifest, so anything but control characters.
bool valid_entry_name(Reader& r, const Node& v, const std::string& name, const std::string& field,
                      std::string_view what) {
  if (!name.empty() && !has_control_chars(name, false)) return true;
  r.error(v, field, "expected a " + std::string(what) + " name without control characters");
  return false;
}

// A required non-empty string field of `v`.
bool required_string(Reader& r, const Node& v, const std::string& field, const config::Field& f,
                     std::string& out) {
  const Node* n = v.find(f.name);
  const std::string path = field + "." + std::string(f.name);
  if (n == nullptr) {
    r.error(v, path, "missing required field; expected " + std::string(f.doc));
    return false;
  }
  auto s = r.nonempty_string(*n, path, f);
  if (s) out = *s;
  return s.has_value();
}

// An optional field of `v` read by `read` (a Reader method's result) into `out`.
template <class T, class Read>
bool optional_field(const Node& v, const std::string& field, const config::Field& f, T& out,
                    Read read) {
  const Node* n = v.find(f.name);
  if (n == nullptr) return true;
  auto value = read(*n, field + "." + std::string(f.name), f);
  if (value) out = std::move(*value);
  return value.has_value();
}

std::optional<Toolbox> read_toolbox(Reader& r, const std::string& name, const Node& v,
                                    const std::string& field) {
  using schema::kToolbox;
  if (!r.expect_map(v, field, schema::field(schema::kFrontmatter, "toolbox"))) return std::nullopt;
  Toolbox t;
  t.name = name;
  auto f = [&](std::string_view key) -> const config::Field& {
    return schema::field(kToolbox, key);
  };
  auto strings = [&](const Node& n, const std::string& path, const config::Field& spec) {
    return r.strings(n, path, spec);
  };
  bool ok = valid_entry_name(r, v, name, field, "toolbox");
  ok = required_string(r, v, field, f("description"), t.description) && ok;
  ok = required_string(r, v, field, f("command"), t.command) && ok;
  ok = optional_field(v, field, f("args"), t.args, strings) && ok;
  ok = optional_field(v, field, f("env"), t.env,
                      [&](const Node& n, const std::string& path, const config::Field& spec) {
                        return r.string_map(n, path, spec);
                      }) &&
       ok;
  ok = optional_field(v, field, f("network"), t.network,
                      [&](const Node& n, const std::string& path, const config::Field& spec) {
                        return r.boolean(n, path, spec);
                      }) &&
       ok;
  ok = optional_field(v, field, f("parameters"), t.parameters,
                      [&](const Node& n, const std::string& path,
                          const config::Field& spec) -> std::optional<Json> {
                        if (r.expect_map(n, path, spec)) return to_json(n);
                        return std::nullopt;
                      }) &&
       ok;
  ok = optional_field(v, field, f("env_passthrough"), t.env_passthrough, strings) && ok;
  ok = optional_field(v, field, f("search_hints"), t.search_hints, strings) && ok;
  r.unknown_keys(v, field, kToolbox);
  if (!ok) return std::nullopt;
  return t;
}

std::optional<McpServer> read_mcp(Reader& r, const std::string& name, const Node& v,
                                  const std::string& field) {
  using schema::kMcp;
  if (!r.expect_map(v, field, schema::field(schema::kFrontmatter, "mcp"))) return std::nullopt;
  McpServer s;
  s.name = name;
  bool ok = valid_entry_name(r, v, name, field, "server");
  ok = required_string(r, v, field, schema::field(kMcp, "command"), s.command) && ok;
  ok = optional_field(v, field, schema::field(kMcp, "args"), s.args,
                      [&](const Node& n, const std::string& path, const config::Field& spec) {
                        return r.strings(n, path, spec);
                      }) &&
       ok;
  ok = optional_field(v, field, schema::field(kMcp, "env"), s.env,
                      [&](const Node& n, const std::string& path, const config::Field& spec) {
                        return r.string_map(n, path, spec);
                      }) &&
       ok;
  r.unknown_keys(v, field, kMcp);
  if (!ok) return std::nullopt;
  return s;
}

const config::Field& top(std::string_view key) { return schema::field(schema::kFrontmatter, key); }

// name, description and the optional strings (license, compatibility, homepage, model, version).
void read_identity(Reader& r, const Node& root, Skill& skill) {
  if (const Node* v = root.find("name")) {
    if (auto s = r.nonempty_string(*v, "name", top("name"))) {
      if (has_control_chars(*s, false))
        r.error(*v, "name", "expected a single-line name without control characters");
      else
        skill.name = std::string(trim(*s));
    }
  } else {
    r.error(root, "name", "missing required field; expected the skill's name");
  }
  if (const Node* v = root.find("description")) {
    if (auto s = r.nonempty_string(*v, "description", top("description")))
      skill.description = std::string(trim(*s));
  } else {
    r.error(root, "description",
            "missing required field; expected what the skill does and when to use it");
  }
  for (const auto& [key, out] :
       {std::pair{"license", &skill.license}, std::pair{"compatibility", &skill.compatibility},
        std::pair{"homepage", &skill.homepage}, std::pair{"model", &skill.model}}) {
    if (const Node* v = root.find(key)) {
      if (auto s = r.string(*v, key, top(key))) *out = *s;
    }
  }
  if (const Node* v = root.find("version")) {
    // `version: 1.0` in YAML and `version = "1.0"` in TOML both mean the text "1.0".
    if (v->kind == Node::Kind::Int || v->kind == Node::Kind::Float)
      skill.version = v->text;
    else if (auto s = r.string(*v, "version", top("version")))
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
    else if (auto l = r.strings(*v, "allowed-tools", top("allowed-tools")))
      skill.allowed_tools = *l;
  }

  for (const char* key : {"trigger", "triggers"}) {
    const Node* v = root.find(key);
    if (v == nullptr) continue;
    if (v->kind == Node::Kind::Scalar) {
      auto words = split_triggers(v->text);
      skill.triggers.insert(skill.triggers.end(), words.begin(), words.end());
    } else if (auto l = r.strings(*v, key, top(key))) {
      for (const auto& s : *l) {
        auto w = trim(s);
        if (!w.empty()) skill.triggers.emplace_back(w);
      }
    }
  }
  if (const Node* v = root.find("requires")) {
    if (auto l = r.strings(*v, "requires", top("requires"), true)) skill.requirements = *l;
  }
  if (skill.requirements.empty() && !skill.metadata.is_null())
    skill.requirements = bins_from_metadata(skill.metadata);
  if (const Node* v = root.find("lazy")) {
    if (auto b = r.boolean(*v, "lazy", top("lazy"))) skill.lazy = *b;
  }
}

void read_permissions(Reader& r, const Node& root, Skill& skill, Manifest& manifest) {
  const Node* v = root.find("permissions");
  if (v == nullptr) return;
  manifest.permissions_line = v->line;
  if (!r.expect_map(*v, "permissions", top("permissions"))) return;
  Permissions& p = skill.permissions;
  for (const auto& [key, out] : {std::pair{"files", &p.files}, std::pair{"network", &p.network},
                                 std::pair{"env", &p.env}, std::pair{"commands", &p.commands}}) {
    if (const Node* l = v->find(key)) {
      const config::Field& f = schema::field(schema::kPermissions, key);
      if (auto s = r.strings(*l, std::string("permissions.") + key, f)) *out = *s;
    }
  }
  r.unknown_keys(*v, "permissions", schema::kPermissions);
}

// The servers a skill declares: toolbox NAME, mcp NAME, and kernex's `mcp-NAME: command arg...`.
void read_servers(Reader& r, const Node& root, const std::filesystem::path& file,
                  Manifest& manifest) {
  if (const Node* v = root.find("toolbox");
      v != nullptr && r.expect_map(*v, "toolbox", top("toolbox"))) {
    for (const auto& [name, entry] : v->entries) {
      std::string field = "toolbox." + name;
      if (auto t = read_toolbox(r, name, entry, field))
        manifest.toolboxes.push_back({*t, file, entry.line, field});
    }
  }
  if (const Node* v = root.find("mcp"); v != nullptr && r.expect_map(*v, "mcp", top("mcp"))) {
    for (const auto& [name, entry] : v->entries) {
      std::string field = "mcp." + name;
      if (auto s = read_mcp(r, name, entry, field))
        manifest.mcp_servers.push_back({*s, file, entry.line, field});
    }
  }
  // kernex's YAML form: `mcp-NAME: command arg...`.
  const config::Field& line_field = top(schema::kMcpPrefixKey);
  for (const auto& [key, v] : root.entries) {
    if (!key.starts_with("mcp-")) continue;
    std::string name = key.substr(4);
    if (name.empty()) {
      r.error(v, key, "expected mcp-NAME with a server name");
      continue;
    }
    auto s = r.string(v, key, line_field);
    if (!s) continue;
    auto words = split_whitespace(*s);
    if (words.empty()) {
      r.expected(v, key, "a non-empty string", line_field);
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
            "expected the frontmatter to be a mapping of fields (name, description, ...), got " +
                field_value(root).got);
    return manifest;
  }
  read_identity(r, root, skill);
  read_activation(r, root, skill);
  read_permissions(r, root, skill, manifest);
  read_servers(r, root, file, manifest);
  r.unknown_keys(root, "", schema::kFrontmatter, true);
  return manifest;
}

std::vector<Declared<McpServer>> read_mcp_json(const Node& root, const std::filesystem::path& file,
                                               std::vector<Diagnostic>& diagnostics) {
  Reader r(file, diagnostics);
  std::vector<Declared<McpServer>> out;
  if (!r.expect_map(root, "", schema::kMcpJsonDocument)) return out;
  const Node* servers = root.find("mcpServers");
  if (servers == nullptr) return out;
  if (!r.expect_map(*servers, "mcpServers", top("mcp"))) return out;
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
  if (!r.expect_map(root, "", schema::kToolboxJsonDocument)) return out;
  const Node* boxes = root.find("toolboxes");
  if (boxes == nullptr) return out;
  if (!r.expect_map(*boxes, "toolboxes", top("toolbox"))) return out;
  for (const auto& [name, entry] : boxes->entries) {
    std::string field = "toolboxes." + name;
    if (auto t = read_toolbox(r, name, entry, field)) out.push_back({*t, file, 0, field});
  }
  return out;
}

}  // namespace kernex::skills::detail
