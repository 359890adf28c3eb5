// The toolbox -> sandbox translation shared by the toolbox-script plugin and `kernex tool run`.
#include "kernex/sandbox/toolbox.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cstring>
#include <cmath>
#include <cstdlib>
#include <set>

#include "kernex/kernel_files.hpp"
#include "kernex/log.hpp"

namespace kernex::sandbox {
namespace fs = std::filesystem;

namespace {

Error config_error(std::string_view origin, const std::string& key, const std::string& what) {
  return Error(ErrorCode::Config, std::string(origin) + ": `" + key + "` " + what);
}

std::string tail(const std::string& s, std::size_t n) {
  if (s.size() <= n) return s;
  std::size_t start = s.size() - n;
  while (start < s.size() && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80)
    ++start;  // UTF-8 boundary
  return "..." + s.substr(start);
}

std::string seconds_text(std::chrono::milliseconds ms) {
  if (ms.count() % 1000 == 0) return std::to_string(ms.count() / 1000) + "s";
  return std::to_string(static_cast<double>(ms.count()) / 1000.0) + "s";
}

bool is_template(const std::string& arg, std::string& name) {
  if (arg.size() < 3 || arg.front() != '{' || arg.back() != '}') return false;
  name = arg.substr(1, arg.size() - 2);
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == '.';
  });
}

}  // namespace

Result<ToolboxRunOptions> ToolboxRunOptions::from_json(const Json& config,
                                                       std::string_view origin) {
  ToolboxRunOptions o;
  if (!config.is_null() && !config.is_object()) {
    return fail(ErrorCode::Config, std::string(origin) + ": config must be an object");
  }
  static const std::set<std::string> known = {"workspace",  "profile",       "timeout",
                                              "max_output", "network_ports", "protect"};
  std::error_code ec;
  o.workspace = fs::current_path(ec);
  if (config.is_null()) return o;
  for (const auto& [key, value] : config.items()) {
    if (!known.contains(key)) {
      return std::unexpected(config_error(origin, key,
                                          "is not an option (expected workspace, profile, timeout, "
                                          "max_output, network_ports, protect)"));
    }
  }
  if (auto it = config.find("profile"); it != config.end()) {
    if (!it->is_string())
      return std::unexpected(config_error(origin, "profile", "must be a file name"));
    auto profile = SandboxProfile::load_yaml_file(it->get<std::string>());
    if (!profile)
      return fail(ErrorCode::Config, std::string(origin) + ": `profile`", profile.error());
    o.base = std::move(*profile);
    if (o.base.workspace) o.workspace = *o.base.workspace;
  }
  if (auto it = config.find("workspace"); it != config.end()) {
    if (!it->is_string() || it->get<std::string>().empty()) {
      return std::unexpected(config_error(origin, "workspace", "must be a directory name"));
    }
    o.workspace = fs::absolute(it->get<std::string>(), ec).lexically_normal();
  }
  if (auto it = config.find("timeout"); it != config.end()) {
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() <= 0 ||
        it->get<double>() > 86400) {
      return std::unexpected(
          config_error(origin, "timeout", "must be a number of seconds in (0, 86400]"));
    }
    o.timeout =
        std::chrono::milliseconds(static_cast<long long>(std::llround(it->get<double>() * 1000)));
    if (o.timeout->count() == 0) o.timeout = std::chrono::milliseconds(1);
  }
  if (auto it = config.find("max_output"); it != config.end()) {
    if (!it->is_number_integer() || it->get<std::int64_t>() <= 0 ||
        it->get<std::int64_t>() > (1 << 30)) {
      return std::unexpected(
          config_error(origin, "max_output", "must be a positive number of bytes"));
    }
    o.max_output = it->get<std::size_t>();
  }
  if (auto it = config.find("network_ports"); it != config.end()) {
    if (!it->is_array())
      return std::unexpected(config_error(origin, "network_ports", "must be a list of TCP ports"));
    o.network_ports.clear();
    for (const auto& port : *it) {
      if (!port.is_number_integer() || port.get<std::int64_t>() <= 0 ||
          port.get<std::int64_t>() > 65535) {
        return std::unexpected(
            config_error(origin, "network_ports", "must hold ports 1-65535, found " + port.dump()));
      }
      o.network_ports.push_back(static_cast<std::uint16_t>(port.get<std::int64_t>()));
    }
  }
  if (auto it = config.find("protect"); it != config.end()) {
    if (!it->is_array())
      return std::unexpected(config_error(origin, "protect", "must be a list of paths"));
    for (const auto& p : *it) {
      if (!p.is_string() || p.get<std::string>().empty() || p.get<std::string>().front() != '/') {
        return std::unexpected(
            config_error(origin, "protect", "must hold absolute paths, found " + p.dump()));
      }
      o.protect.emplace_back(p.get<std::string>());
    }
  }
  return o;
}

std::optional<std::string> skill_file(const fs::path& skill_dir, const std::string& arg) {
  if (skill_dir.empty() || arg.empty() || arg.front() == '/' || arg.front() == '-')
    return std::nullopt;
  fs::path rel = fs::path(arg).lexically_normal();
  if (rel.empty() || *rel.begin() == "..") return std::nullopt;
  std::error_code ec;
  fs::path full = skill_dir / rel;
  if (!fs::is_regular_file(full, ec)) return std::nullopt;
  return full.string();
}

SandboxProfile toolbox_profile(const Toolbox& toolbox, const ToolboxRunOptions& options) {
  SandboxProfile p = options.base;
  if (!options.workspace.empty()) p.workspace = options.workspace;
  if (options.workspace_layers)
    p.workspace_overlay = WorkspaceOverlay::in(*options.workspace_layers);
  if (options.timeout) p.timeout = *options.timeout;
  p.stdout_cap = options.max_output;
  p.protected_paths.insert(p.protected_paths.end(), options.protect.begin(), options.protect.end());

  if (toolbox.network) {
    for (auto port : options.network_ports) {
      if (std::find(p.network.tcp_connect_ports.begin(), p.network.tcp_connect_ports.end(), port) ==
          p.network.tcp_connect_ports.end()) {
        p.network.tcp_connect_ports.push_back(port);
      }
    }
  }
  for (const auto& name : toolbox.env_passthrough) {
    if (is_hijacking_env_name(name)) {
      log(LogLevel::Warn, "toolbox '" + toolbox.name + "': not passing " + name +
                              " through: it can hijack execution");
      continue;
    }
    p.env.passthrough.push_back(name);
  }
  for (const auto& [name, value] : toolbox.env) {
    if (is_hijacking_env_name(name)) {
      log(LogLevel::Warn,
          "toolbox '" + toolbox.name + "': ignoring env " + name + ": it can hijack execution");
      continue;
    }
    p.env.set[name] = value;
  }
  if (!toolbox.allowed_commands.empty()) {
    if (p.allowed_commands.empty()) {
      p.allowed_commands = toolbox.allowed_commands;
    } else {
      // Both restrict: only what the operator's profile also allows.
      std::vector<std::string> narrowed;
      for (const auto& c : toolbox.allowed_commands) {
        if (command_matches_allowlist(p.allowed_commands, c)) narrowed.push_back(c);
      }
      p.allowed_commands = narrowed.empty()
                               ? std::vector<std::string>{"/nonexistent/kernex-nothing-allowed"}
                               : std::move(narrowed);
    }
  }
  // The skill folder is data to its toolbox: readable, never writable, never executable. Only the
  // programs the allow-list resolves to are executable (PolicyBuilder: EXECUTE on each file).
  if (!toolbox.source_dir.empty()) {
    p.read_only.emplace_back(toolbox.source_dir);
    p.keep_read_only.emplace_back(toolbox.source_dir);
  }
  return p;
}

Result<std::vector<std::string>> toolbox_argv(const Toolbox& toolbox, const Json& arguments) {
  std::vector<std::string> argv{toolbox.command};
  bool after_double_dash = false;
  for (std::size_t i = 0; i < toolbox.args.size(); ++i) {
    const std::string& arg = toolbox.args[i];
    std::string name;
    if (!is_template(arg, name)) {
      if (arg == "--") after_double_dash = true;
      argv.push_back(skill_file(toolbox.source_dir, arg).value_or(arg));
      continue;
    }
    const std::string where =
        "toolbox '" + toolbox.name + "': args[" + std::to_string(i) + "] is " + arg;
    auto it = arguments.is_object() ? arguments.find(name) : arguments.end();
    if (!arguments.is_object() || it == arguments.end() || it->is_null()) {
      return fail(ErrorCode::Tool, where + ", but the argument `" + name + "` was not given");
    }
    std::string value;
    if (it->is_string())
      value = it->get<std::string>();
    else if (it->is_number() || it->is_boolean())
      value = it->dump();
    else
      return fail(ErrorCode::Tool,
                  where + ": the argument `" + name + "` must be a string, number or boolean");
    if (value.find('\0') != std::string::npos) {
      return fail(ErrorCode::Tool, where + ": the argument `" + name + "` contains a NUL byte");
    }
    if (!value.empty() && value.front() == '-' && !after_double_dash && !it->is_number()) {
      return fail(ErrorCode::Tool, where + ": the argument `" + name +
                                       "` starts with '-' and would be read as an option");
    }
    argv.push_back(std::move(value));
  }
  return argv;
}

ToolResult toolbox_result(const Toolbox& toolbox, const ToolCall& call, const SpawnResult& r,
                          std::chrono::milliseconds timeout) {
  ToolResult out{call.id, call.name, {}, false};
  if (r.success()) {
    out.content = r.stdout_data;
    return out;
  }
  out.is_error = true;
  std::string& c = out.content;
  if (r.cancelled) {
    c = cancelled_text("Toolbox '" + toolbox.name + "'");
  } else if (r.timed_out) {
    c = "Toolbox '" + toolbox.name + "' timed out after " + seconds_text(timeout) +
        " and was killed";
  } else if (r.term_signal != 0) {
    c = "Toolbox '" + toolbox.name + "' was killed by signal " + std::to_string(r.term_signal) +
        " (" + ::strsignal(r.term_signal) + ")";
  } else {
    c = "Toolbox '" + toolbox.name + "' failed with exit status " + std::to_string(r.exit_code);
  }
  if (!r.stdout_data.empty()) c += "\nstdout:\n" + r.stdout_data;
  if (!r.stderr_data.empty()) c += "\nstderr (last lines):\n" + tail(r.stderr_data, 2000);
  return out;
}

namespace {

// The toolbox fields toolbox_profile() reads (plus name and command, so each toolbox still gets its
// own policy), length-prefixed so no two toolboxes share a key. Serialising the whole toolbox,
// input schema and all, cost ~12 µs per call.
std::string policy_key(const Toolbox& t) {
  std::string key;
  auto put = [&key](std::string_view field) {
    key += std::to_string(field.size());
    key += ':';
    key += field;
  };
  put(t.name);
  put(t.command);
  put(t.source_dir);
  key += t.network ? 'n' : '-';
  key += std::to_string(t.env.size());
  for (const auto& [name, value] : t.env) {
    put(name);
    put(value);
  }
  for (const auto* list : {&t.env_passthrough, &t.allowed_commands}) {
    key += '|' + std::to_string(list->size());
    for (const auto& item : *list) put(item);
  }
  return key;
}

}  // namespace

namespace {

// A workspace inside a registered tool area (serve's <data_dir>/workspaces) is made on its first
// tool call: a session that never runs a tool costs no directory, and a burst of new sessions no
// burst of mkdirs. Only the kernel registers areas, and only it names the workspaces in them.
void create_in_tool_area(const fs::path& workspace) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(workspace, ec))) return;
  const fs::path normal = workspace.lexically_normal();
  for (const auto& area : tool_areas()) {
    const auto rel = normal.lexically_relative(area.path);
    if (rel.empty() || rel == "." || *rel.begin() == "..") continue;
    fs::path at = area.path;
    for (const auto& part : rel) {
      at /= part;
      if (::mkdir(at.c_str(), 0700) != 0 && errno != EEXIST) return;
    }
    return;
  }
}

}  // namespace

Result<fs::path> call_workspace(const std::optional<fs::path>& requested,
                                const fs::path& configured) {
  if (!requested) return configured;
  std::error_code ec;
  if (requested->is_absolute()) create_in_tool_area(*requested);
  if (!requested->is_absolute() || !fs::is_directory(*requested, ec)) {
    return fail(ErrorCode::Tool,
                "the run's workspace '" + requested->string() +
                    "' is not an existing directory (an absolute path the host creates)");
  }
  return requested->lexically_normal();
}

Result<CallWorkspace> call_workspace(const CallScope& scope, const fs::path& configured) {
  if (scope.workspace_layers && !scope.workspace) {
    return fail(ErrorCode::Tool, "the run's workspace layers '" + scope.workspace_layers->string() +
                                     "' were given without the workspace they lie over");
  }
  KERNEX_ASSIGN_OR_RETURN(auto dir, call_workspace(scope.workspace, configured));
  return CallWorkspace{std::move(dir), scope.workspace.has_value(), scope.workspace_layers};
}

std::string CallWorkspace::key() const {
  if (!host) return {};
  // A NUL never occurs in a path: no (workspace, layers) pair reads as another.
  return "@" + dir.string() + (layers ? '\0' + layers->string() : std::string());
}

SandboxProfile toolbox_profile(const Toolbox& toolbox, ToolboxRunOptions options,
                               const CallWorkspace& where) {
  if (where.host) {
    options.workspace = where.dir;
    options.workspace_layers = where.layers;
  }
  SandboxProfile profile = toolbox_profile(toolbox, options);
  if (where.host) profile.working_dir = where.dir;  // the host's workspace is the cwd too
  return profile;
}

std::string cancelled_text(const std::string& what) {
  return what + " was cancelled: the run was stopped, and every process it started was killed";
}

Result<std::shared_ptr<const Policy>> ToolboxRunner::policy_for(const Toolbox& toolbox,
                                                                const CallWorkspace& where) {
  // Many sessions' workspaces pass through a server's runner: the cache is bounded, and dropping
  // it whole is cheap next to the policies in use, which their callers keep alive.
  constexpr std::size_t kMaxPolicies = 256;
  const std::string key = policy_key(toolbox) + where.key();
  std::lock_guard lock(mutex_);
  if (auto it = policies_.find(key); it != policies_.end()) return it->second;
  KERNEX_ASSIGN_OR_RETURN(auto policy,
                          PolicyBuilder(toolbox_profile(toolbox, options_, where)).Build());
  auto shared = std::make_shared<const Policy>(std::move(policy));
  if (policies_.size() >= kMaxPolicies) policies_.clear();
  policies_.emplace(key, shared);
  return shared;
}

ToolResult ToolboxRunner::run(const Toolbox& toolbox, const ToolCall& call,
                              const CallScope& scope) {
  auto refuse = [&](std::string message) {
    return ToolResult{call.id, call.name, std::move(message), true};
  };
  if (!command_matches_allowlist(toolbox.allowed_commands, toolbox.command)) {
    return refuse("Toolbox '" + toolbox.name + "' blocked: command \"" + toolbox.command +
                  "\" is not in the skill's declared command allow-list");
  }
  auto argv = toolbox_argv(toolbox, call.arguments);
  if (!argv) return refuse(argv.error().message);
  if (scope.stop.stop_requested()) return refuse(cancelled_text("Toolbox '" + toolbox.name + "'"));
  auto where = call_workspace(scope, options_.workspace);
  if (!where) return refuse("Toolbox '" + toolbox.name + "' cannot run: " + where.error().message);
  auto policy = policy_for(toolbox, *where);
  if (!policy) {
    return refuse("Refusing to run toolbox '" + toolbox.name +
                  "': the sandbox can't be set up: " + policy.error().describe());
  }
  Command cmd;
  cmd.argv = std::move(*argv);
  cmd.stdin_data = (call.arguments.is_null() ? Json::object() : call.arguments)
                       .dump(-1, ' ', false, Json::error_handler_t::replace);
  if (!toolbox.source_dir.empty()) cmd.env["KERNEX_SKILL_DIR"] = toolbox.source_dir;
  cmd.stop = scope.stop;
  auto result = spawn(**policy, cmd);
  if (!result && result.error().code == ErrorCode::Cancelled) {
    return refuse(cancelled_text("Toolbox '" + toolbox.name + "'"));
  }
  if (!result) {
    return refuse("Refusing to run toolbox '" + toolbox.name + "': " + result.error().describe());
  }
  return toolbox_result(toolbox, call, *result, (*policy)->profile().timeout);
}

}  // namespace kernex::sandbox
