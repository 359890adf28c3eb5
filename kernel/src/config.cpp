// kernex.yaml -> Config. Every key is optional; unknown keys, duplicate keys and wrong types
// are Config errors of the form "origin:line: key.path: expected X, got Y".
//
// Typing rules (also in cli/README.md):
// - A null value (`key:`, `key: ~`) means "not set": the default stays.
// - String fields take any scalar's text (`project: 123` is the string "123").
// - Integer and number fields take plain (unquoted) scalars only: `max_turns: "10"` is an error.
// - Paths expand a leading `~` / `~/` to $HOME; relative paths resolve against the directory of
//   the file they were read from (parse_yaml: the directory part of `origin`, if it has one).
// - Plugin option mappings become JSON by the rule in yaml_to_json.hpp.
#include "kernex/config.hpp"
#include "kernex/files.hpp"
#include "kernex/kernel_files.hpp"
#include "kernex/number.hpp"

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <set>
#include <sstream>
#include <system_error>

#include <yaml-cpp/yaml.h>

#include "config_internal.hpp"
#include "config_schema.hpp"
#include "install_layout.hpp"
#include "yaml_to_json.hpp"

namespace kernex {

namespace fs = std::filesystem;

namespace {

// Config files are small; anything bigger is a mistake (or an attack), not a config.
constexpr std::size_t kMaxConfigBytes = kMaxManifestFileBytes;

// `memory: none` (or {name: none}): the kernel runs without a memory store.
constexpr std::string_view kNoMemory = "none";

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

// One value being read: the node, its dotted key path and where to point in messages.
struct Field {
  YAML::Node value;
  std::string path;
  YAML::Mark mark;
};

class ConfigReader {
 public:
  ConfigReader(std::string origin, fs::path base_dir)
      : origin_(std::move(origin)), base_dir_(std::move(base_dir)) {}

  Result<void> read(const YAML::Node& root, Config& out) const {
    if (root.IsNull()) return {};  // empty file: defaults
    if (!root.IsMap())
      return err(Field{root, "", root.Mark()},
                 "expected a mapping of settings, got " + detail::describe_yaml(root));
    return each_key(Field{root, "", root.Mark()}, detail::schema::kTop,
                    [&](const std::string& key, const Field& f) { return top_level(key, f, out); });
  }

 private:
  Result<void> top_level(const std::string& key, const Field& f, Config& out) const {
    if (key == "data_dir") return assign(path_value(f), out.data_dir);
    if (key == "plugin_dirs") return assign_list(path_list(f), out.plugin_dirs);
    if (key == "skill_dirs") return assign_list(path_list(f), out.skill_dirs);
    if (key == "system_prompt") return assign(string_value(f), out.system_prompt);
    if (key == "channel") return assign(string_value(f), out.channel);
    if (key == "project") return assign(string_value(f), out.project);
    if (key == "provider") {
      KERNEX_ASSIGN_OR_RETURN(auto ref, plugin_ref(f));
      if (ref) out.provider = std::move(*ref);
      return {};
    }
    if (key == "providers") return providers(f, out.provider_options);
    if (key == "memory") {
      KERNEX_ASSIGN_OR_RETURN(auto ref, plugin_ref(f));
      if (!ref) return {};  // `memory:` alone: the default store stays
      if ((ref)->name == kNoMemory)
        out.memory.reset();
      else
        out.memory = std::move(ref);
      return {};
    }
    if (key == "hooks") return assign_list(plugin_list(f), out.hooks);
    if (key == "channels") return assign_list(channel_list(f), out.channels);
    if (key == "toolboxes") return assign_list(plugin_list(f), out.toolboxes.emplace());
    if (key == "permissions") return permissions(f, out);
    if (key == "pricing_file") {
      KERNEX_ASSIGN_OR_RETURN(auto p, path_value(f));
      if (p) out.pricing_file = std::move(*p);
      return {};
    }
    if (key == "limits") return limits(f, out.limits);
    if (key == "trajectories") {
      KERNEX_ASSIGN_OR_RETURN(auto v, bool_value(f));
      if (v) out.trajectories = *v;
      return {};
    }
    if (key == "workspace") return workspace(f, out);
    if (key == "serve" || key == "topology") {
      // Read by the layer above (kernex::server::ServeConfig, kernex::topology), which checks
      // its keys.
      KERNEX_ASSIGN_OR_RETURN(auto section, options(f));
      out.sections[key] = std::move(section);
      return {};
    }
    return err(f, "unknown key");  // unreachable: each_key checked the name
  }

  // ---- errors -------------------------------------------------------------------------

  config::Where where(const Field& f) const {
    return config::Where{origin_, f.mark.line >= 0 ? f.mark.line + 1 : 0, f.path};
  }
  std::unexpected<Error> err(const Field& f, const std::string& what) const {
    return config::field_error(where(f), what);
  }
  std::unexpected<Error> expected(const Field& f, std::string_view what) const {
    return err(f, std::string("expected ") + std::string(what) + ", got " +
                      detail::describe_yaml(f.value));
  }

  // The node as the field reader sees it (config_fields.hpp).
  static config::FieldValue value_of(const YAML::Node& node) {
    config::FieldValue v;
    if (node.IsScalar()) {
      v.json = detail::yaml_scalar_to_json(node);
      v.text = node.Scalar();
      // Plain digits too many for 64 bits stay a string in plugin options (yaml_to_json.hpp);
      // here they are a number out of range, as they were written.
      const std::string& s = node.Scalar();
      if (node.Tag() == "?" && v.json.is_string() && !s.empty() &&
          s.find_first_not_of("0123456789") == std::string::npos)
        v.json = std::strtod(s.c_str(), nullptr);
    } else if (node.IsSequence()) {
      v.json = Json::array();
    } else if (node.IsMap()) {
      v.json = Json::object();
    }
    v.got = detail::describe_yaml(node);
    return v;
  }

  // ---- structure ----------------------------------------------------------------------

  static std::string child_path(const std::string& parent, const std::string& key) {
    return parent.empty() ? key : parent + "." + key;
  }

  static Field field_for(const YAML::Node& key, const YAML::Node& value, std::string path) {
    // A null value's mark points past the key (often the next line): use the key's.
    YAML::Mark mark = value.IsNull() || value.Mark().line < 0 ? key.Mark() : value.Mark();
    return Field{value, std::move(path), mark};
  }

  // Walks a mapping, rejecting duplicate keys and keys not in `section`.
  Result<void> each_key(
      const Field& map, const config::Section& section,
      const std::function<Result<void>(const std::string&, const Field&)>& visit) const {
    if (map.value.IsNull()) return {};
    if (!map.value.IsMap()) return expected(map, "a mapping");
    std::set<std::string> seen;
    for (auto it = map.value.begin(); it != map.value.end(); ++it) {
      const YAML::Node key = it->first;  // a copy: `it->` yields a temporary proxy
      if (!key.IsScalar()) return expected(Field{key, map.path, key.Mark()}, "a key name");
      const std::string name = key.Scalar();
      Field child = field_for(key, it->second, child_path(map.path, name));
      KERNEX_RETURN_IF_ERROR(
          config::known_key(section, name, where(Field{key, child.path, key.Mark()})));
      if (!seen.insert(name).second)
        return err(Field{key, child.path, key.Mark()}, "duplicate key");
      if (auto r = visit(name, child); !r) return r;
    }
    return {};
  }

  template <class T, class V>
  static Result<void> assign(Result<std::optional<V>> value, T& out) {
    if (!value) return std::unexpected(value.error());
    if (*value) out = std::move(**value);
    return {};
  }
  template <class T>
  static Result<void> assign_list(Result<std::vector<T>> value, std::vector<T>& out) {
    if (!value) return std::unexpected(value.error());
    out = std::move(*value);
    return {};
  }

  // ---- scalars ------------------------------------------------------------------------

  Result<std::optional<std::string>> string_value(const Field& f) const {
    if (f.value.IsNull()) return std::nullopt;
    return config::read_string(value_of(f.value), where(f));
  }

  Result<std::optional<fs::path>> path_value(const Field& f) const {
    if (!f.value.IsNull() && !f.value.IsScalar()) return expected(f, "a path");
    KERNEX_ASSIGN_OR_RETURN(auto s, string_value(f));
    if (!s) return std::nullopt;
    if ((s)->empty()) return err(f, "expected a path, got an empty string");
    auto expanded = detail::expand_home(*s, f.path);
    if (!expanded) return err(f, expanded.error().message);
    fs::path p = std::move(*expanded);
    if (p.is_relative() && !base_dir_.empty()) p = base_dir_ / p;
    return p.lexically_normal();
  }

  Result<std::optional<std::uint64_t>> uint_value(const Field& f, const config::Field& spec) const {
    if (f.value.IsNull()) return std::nullopt;
    return config::read_integer(spec, value_of(f.value), where(f));
  }

  Result<std::optional<bool>> bool_value(const Field& f) const {
    if (f.value.IsNull()) return std::nullopt;
    return config::read_bool(value_of(f.value), where(f));
  }

  // One of the field's choices, as the enum value at the same index of `values` (a null keeps
  // `out`).
  template <class E, std::size_t N>
  Result<void> enum_value(const Field& f, const config::Field& spec, const std::array<E, N>& values,
                          E& out) const {
    if (f.value.IsNull()) return {};
    KERNEX_ASSIGN_OR_RETURN(auto i, config::read_enum(spec, value_of(f.value), where(f)));
    if (i && *i < N) out = values[*i];
    return {};
  }

  Result<std::optional<double>> number_value(const Field& f, const config::Field& spec) const {
    if (f.value.IsNull()) return std::nullopt;
    return config::read_number(spec, value_of(f.value), where(f));
  }

  // ---- lists --------------------------------------------------------------------------

  template <class T>
  Result<std::vector<T>> list_of(
      const Field& f, std::string_view list_kind, std::string_view item_kind,
      const std::function<Result<std::optional<T>>(const Field&)>& item) const {
    std::vector<T> out;
    if (f.value.IsNull()) return out;
    if (!f.value.IsSequence()) return expected(f, list_kind);
    std::size_t i = 0;
    for (const auto& node : f.value) {
      Field e{node, f.path + "[" + std::to_string(i++) + "]",
              node.Mark().line >= 0 ? node.Mark() : f.mark};
      KERNEX_ASSIGN_OR_RETURN(auto v, item(e));
      if (!v) return expected(e, item_kind);
      out.push_back(std::move(*v));
    }
    return out;
  }

  Result<std::vector<fs::path>> path_list(const Field& f) const {
    return list_of<fs::path>(f, "a list of paths", "a path",
                             [this](const Field& e) { return path_value(e); });
  }

  Result<std::vector<std::string>> string_list(const Field& f) const {
    return list_of<std::string>(f, "a list of strings", "a string",
                                [this](const Field& e) { return string_value(e); });
  }

  // ---- plugins ------------------------------------------------------------------------

  Result<Json> options(const Field& f) const {
    if (f.value.IsNull()) return Json::object();
    if (!f.value.IsMap()) return expected(f, "a mapping of options");
    detail::YamlLocator locator{origin_};
    return detail::yaml_to_json(f.value, f.path, locator);
  }

  // `name` or {name: str, options: mapping}. Null: not set.
  Result<std::optional<PluginRef>> plugin_ref(const Field& f) const {
    if (f.value.IsNull()) return std::nullopt;
    constexpr std::string_view kExpected = "a plugin name or a mapping {name, options}";
    if (f.value.IsScalar()) {
      if (f.value.Scalar().empty()) return expected(f, kExpected);
      return PluginRef{f.value.Scalar(), Json::object()};
    }
    if (!f.value.IsMap()) return expected(f, kExpected);
    PluginRef ref;
    bool named = false;
    auto r = each_key(f, detail::schema::kPluginRef,
                      [&](const std::string& key, const Field& sub) -> Result<void> {
                        if (key == "name") {
                          auto name = string_value(sub);
                          if (!name) return std::unexpected(name.error());
                          if (!*name || (*name)->empty()) return expected(sub, "a plugin name");
                          ref.name = std::move(**name);
                          named = true;
                          return {};
                        }
                        KERNEX_ASSIGN_OR_RETURN(auto opts, options(sub));
                        ref.config = std::move(opts);
                        return {};
                      });
    if (!r) return std::unexpected(r.error());
    if (!named) return err(f, "missing key `name` (the plugin's name)");
    return ref;
  }

  Result<std::vector<PluginRef>> plugin_list(const Field& f) const {
    return list_of<PluginRef>(f, "a list of plugins", "a plugin name or a mapping {name, options}",
                              [this](const Field& e) { return plugin_ref(e); });
  }

  // Each `{name, options}` (or a bare name) once; the name becomes a directory name.
  Result<std::vector<PluginRef>> channel_list(const Field& f) const {
    KERNEX_ASSIGN_OR_RETURN(auto list, plugin_list(f));
    std::set<std::string> seen;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string& name = list[i].name;
      const bool plain = name != "." && name != ".." && name.size() <= 64 &&
                         name.find_first_not_of(
                             "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                             "0123456789._-") == std::string::npos;
      Field item{f.value[i], f.path + "[" + std::to_string(i) + "]", f.value[i].Mark()};
      if (!plain) return err(item, "expected a channel name of letters, digits, '.', '_' or '-'");
      if (!seen.insert(name).second) return err(item, "duplicate channel `" + name + "`");
    }
    return list;
  }

  Result<void> providers(const Field& f, std::map<std::string, Json>& out) const {
    if (f.value.IsNull()) return {};
    if (!f.value.IsMap()) return expected(f, "a mapping of provider name to options");
    std::set<std::string> seen;
    for (auto it = f.value.begin(); it != f.value.end(); ++it) {
      const YAML::Node key = it->first;  // a copy: `it->` yields a temporary proxy
      if (!key.IsScalar() || key.Scalar().empty())
        return expected(Field{key, f.path, key.Mark()}, "a provider name");
      Field sub = field_for(key, it->second, child_path(f.path, key.Scalar()));
      if (!seen.insert(key.Scalar()).second)
        return err(Field{key, sub.path, key.Mark()}, "duplicate key");
      KERNEX_ASSIGN_OR_RETURN(auto opts, options(sub));
      out[key.Scalar()] = std::move(opts);
    }
    return {};
  }

  // ---- sections -----------------------------------------------------------------------

  Result<void> permissions(const Field& f, Config& out) const {
    return each_key(f, detail::schema::kPermissions,
                    [&](const std::string& key, const Field& sub) -> Result<void> {
                      if (key == "file") {
                        KERNEX_ASSIGN_OR_RETURN(auto p, path_value(sub));
                        if (p) out.permissions_file = std::move(*p);
                        return {};
                      }
                      return assign_list(string_list(sub), key == "allow" ? out.allow
                                                           : key == "ask" ? out.ask
                                                                          : out.deny);
                    });
  }

  Result<void> workspace(const Field& f, Config& out) const {
    using detail::schema::kWorkspace;
    return each_key(f, kWorkspace, [&](const std::string& key, const Field& sub) {
      return enum_value(sub, *kWorkspace.find(key),
                        std::array{WorkspaceMode::Overlay, WorkspaceMode::Plain},
                        out.workspace_mode);
    });
  }

  Result<void> limits(const Field& f, Limits& out) const {
    using detail::schema::kLimits;
    return each_key(f, kLimits, [&](const std::string& key, const Field& sub) -> Result<void> {
      const config::Field& spec = *kLimits.find(key);
      if (spec.type == config::FieldType::Number) {
        KERNEX_ASSIGN_OR_RETURN(auto v, number_value(sub, spec));
        if (v) out.budgets.cost_budget_usd = *v;
        return {};
      }
      if (spec.type == config::FieldType::Enum)
        return enum_value(sub, spec,
                          std::array{CompactionStrategy::Drop, CompactionStrategy::Summarize},
                          out.compaction);
      KERNEX_ASSIGN_OR_RETURN(auto v, uint_value(sub, spec));
      if (v) set_limit(key, *v, out);
      return {};
    });
  }

  // An integer limit, already in its field's range.
  static void set_limit(const std::string& key, std::uint64_t n, Limits& out) {
    if (key == "max_turns")
      out.budgets.max_turns = static_cast<std::uint32_t>(n);
    else if (key == "token_budget")
      out.budgets.token_budget = n;
    else if (key == "tool_call_budget")
      out.budgets.tool_call_budget = static_cast<std::uint32_t>(n);
    else if (key == "max_context_messages")
      out.max_context_messages = static_cast<std::size_t>(n);
    else if (key == "max_depth")
      out.max_depth = static_cast<std::uint32_t>(n);
    else
      out.conversation_idle = std::chrono::minutes(static_cast<std::chrono::minutes::rep>(n));
  }

  std::string origin_;
  fs::path base_dir_;
};

Result<Config> parse_with_base(std::string_view text, std::string_view origin,
                               const fs::path& base_dir) {
  Config config = detail::default_config();
  try {
    YAML::Node root = YAML::Load(std::string(text));
    ConfigReader reader{std::string(origin), base_dir};
    KERNEX_RETURN_IF_ERROR(reader.read(root, config));
  } catch (const YAML::ParserException& e) {
    std::string where(origin);
    if (e.mark.line >= 0) where += ":" + std::to_string(e.mark.line + 1);
    return fail(ErrorCode::Config, where + ": invalid YAML: " + e.msg);
  } catch (const std::exception& e) {
    // yaml-cpp throws for shapes our checks should have excluded; never let it escape.
    return fail(ErrorCode::Config, std::string(origin) + ": invalid YAML: " + e.what());
  }
  return config;
}

Result<std::string> read_config_file(const fs::path& path, std::string_view named_by) {
  auto text = read_regular_file(path, "config file", kMaxConfigBytes);
  if (!text) {
    const std::string by = named_by.empty() ? "" : " (named by " + std::string(named_by) + ")";
    return fail(ErrorCode::Config, text.error().message + by);
  }
  return text;
}

}  // namespace

namespace detail {

std::optional<fs::path> home_dir() {
  if (const char* home = env("HOME")) return fs::path(home);
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(getuid(), &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr &&
      found->pw_dir != nullptr && *found->pw_dir != '\0')
    return fs::path(found->pw_dir);
  return std::nullopt;
}

Result<fs::path> expand_home(std::string_view path, std::string_view what) {
  if (path != "~" && !path.starts_with("~/")) return fs::path(path);
  auto home = home_dir();
  if (!home)
    return fail(ErrorCode::Config,
                std::string(what) +
                    ": cannot expand `~`: $HOME is not set and the user has no home directory");
  if (path == "~") return *home;
  return *home / fs::path(path.substr(2));
}

Config default_config() {
  Config c;
  const char* xdg = env("XDG_DATA_HOME");
  if (xdg != nullptr && fs::path(xdg).is_absolute()) {  // XDG: relative values are ignored
    c.data_dir = fs::path(xdg) / "kernex";
  } else if (auto home = home_dir()) {
    c.data_dir = *home / ".local" / "share" / "kernex";
  } else {
    // No home at all (some service accounts): a per-user directory that always exists.
    c.data_dir = fs::temp_directory_path() / ("kernex-" + std::to_string(getuid()));
  }
  // Memory is on unless configured off: conversations continue across runs, in
  // <data_dir>/memory.db, the file `kernex memory` reads.
  c.memory = PluginRef{"sqlite", Json::object()};
  return c;
}

Result<void> apply_env_overrides(Config& config) {
  if (const char* dir = env("KERNEX_DATA_DIR")) {
    KERNEX_ASSIGN_OR_RETURN(auto p, expand_home(dir, "KERNEX_DATA_DIR"));
    std::error_code ec;
    fs::path abs = fs::absolute(p, ec);
    config.data_dir = (ec ? p : abs).lexically_normal();
  }
  return {};
}

}  // namespace detail

Result<Config> Config::parse_yaml(std::string_view text, std::string_view origin) {
  return parse_with_base(text, origin, fs::path(origin).parent_path());
}

Config Config::defaults() {
  Config config = detail::default_config();
  (void)detail::apply_env_overrides(config);  // a bad KERNEX_DATA_DIR just keeps the default
  return config;
}

Result<Config> Config::load(const std::optional<fs::path>& file) {
  std::optional<fs::path> path = file;
  std::string_view named_by;
  if (!path) {
    if (const char* from_env = env("KERNEX_CONFIG")) {
      KERNEX_ASSIGN_OR_RETURN(auto p, detail::expand_home(from_env, "KERNEX_CONFIG"));
      path = std::move(p);
      named_by = "KERNEX_CONFIG";
    }
  }

  Config config;
  if (path) {
    std::error_code ec;
    fs::path abs = fs::absolute(*path, ec);
    if (ec) abs = *path;
    abs = abs.lexically_normal();
    // Read by the normalised path, the one registered and protected: `ws/x/../kernex.yaml` would
    // otherwise follow whatever a tool made `ws/x` since.
    KERNEX_ASSIGN_OR_RETURN(auto text, read_config_file(abs, named_by));
    auto parsed = parse_with_base(text, path->string(), abs.parent_path());
    if (!parsed) return parsed;
    config = std::move(*parsed);
    config.source = abs;
  } else {
    config = detail::default_config();
  }
  KERNEX_RETURN_IF_ERROR(detail::apply_env_overrides(config));
  register_kernel_files(config);
  return config;
}

void register_kernel_files(const Config& config) {
  using enum KernelFileAccess;
  if (config.source) register_kernel_file(*config.source, ReadOnly, "config");
  if (config.permissions_file)
    register_kernel_file(*config.permissions_file, ReadOnly, "rules file");
  if (config.pricing_file) register_kernel_file(*config.pricing_file, ReadOnly, "pricing file");
  for (const auto& dir : config.plugin_dirs) register_kernel_file(dir, ReadOnly, "plugin dir");
  for (const auto& dir : config.skill_dirs) register_kernel_file(dir, ReadOnly, "skill dir");
  // Memory, trajectories, locks and trust records: history nobody sandboxed may read or change.
  if (!config.data_dir.empty()) register_kernel_file(config.data_dir, Hidden, "data dir");
}

fs::path default_pricing_file() { return detail::bundled_data_dir() / "pricing.yaml"; }

}  // namespace kernex
