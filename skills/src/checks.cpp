#include "kernex/skills/checks.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <map>

#include "kernex/sandbox/executable.hpp"
#include "kernex/sandbox/profile.hpp"
#include "text.hpp"

namespace kernex::skills {
namespace {

// Exact names (compared upper-cased). Prefix families are handled in is_hijacking_env_name.
constexpr std::array<std::string_view, 22> kHijackNames = {"PATH",
                                                           "NODE_OPTIONS",
                                                           "NODE_PATH",
                                                           "PYTHONPATH",
                                                           "PYTHONSTARTUP",
                                                           "PYTHONHOME",
                                                           "PYTHONUSERBASE",
                                                           "PERL5OPT",
                                                           "PERL5LIB",
                                                           "PERLLIB",
                                                           "RUBYOPT",
                                                           "RUBYLIB",
                                                           "BASH_ENV",
                                                           "ENV",
                                                           "SHELLOPTS",
                                                           "BASHOPTS",
                                                           "PS4",
                                                           "IFS",
                                                           "PROMPT_COMMAND",
                                                           "GLIBC_TUNABLES",
                                                           "JAVA_TOOL_OPTIONS",
                                                           "_JAVA_OPTIONS"};
constexpr std::array<std::string_view, 3> kHijackPrefixes = {"LD_", "DYLD_", "GIT_"};

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string in_quotes(std::string_view s) { return "\"" + std::string(s) + "\""; }

bool has_nul(std::string_view s) { return s.find('\0') != std::string_view::npos; }
bool has_control(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7F;
  });
}

std::string commands_list(const Permissions& p) { return "[" + detail::join(p.commands) + "]"; }

void check_env(const std::map<std::string, std::string>& env, std::vector<Problem>& out) {
  for (const auto& [k, v] : env) {
    if (!is_valid_env_name(k)) {
      out.push_back(
          {"env." + k, "expected an environment variable name matching [A-Za-z_][A-Za-z0-9_]*"});
    } else if (is_hijacking_env_name(k)) {
      out.push_back(
          {"env." + k,
           "setting " + k +
               " could hijack what the program executes or loads; skills may not override it"});
    }
    if (has_control(v))
      out.push_back({"env." + k, "expected a value without control characters (newlines, NUL)"});
  }
}

void check_args(const std::vector<std::string>& args, std::vector<Problem>& out) {
  // Arguments go straight to execve, never through a shell, so shell metacharacters are
  // harmless; only NUL cannot be represented.
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (has_nul(args[i]))
      out.push_back({"args[" + std::to_string(i) + "]", "expected an argument without NUL bytes"});
  }
}

// Why `command` does not name a program (see sandbox::check_executable), or nullopt when it does or
// is not installed here (a missing program grants nothing; `requires` reports it).
std::optional<std::string> not_a_program(std::string_view command) {
  std::filesystem::path file;
  if (command.find('/') == std::string_view::npos) {
    static const std::vector<std::filesystem::path> search = sandbox::SandboxProfile{}.search_path;
    auto found = sandbox::find_program(search, std::string(command));
    if (!found) return std::nullopt;
    file = *found;
  } else if (command.front() != '/') {
    return "expected a program name or an absolute path";
  } else {
    file = std::filesystem::path(command);
  }
  auto program = sandbox::check_executable(file);
  if (!program && program.error().code != ErrorCode::Io) return program.error().message;
  return std::nullopt;
}

// A permissions.commands entry grants executing one program, so each must name one; any that does
// not refuses every toolbox and MCP server of the skill, naming the entry.
void check_commands_grant_programs(const Permissions& p, std::vector<Problem>& out) {
  for (const auto& c : p.commands) {
    if (auto why = not_a_program(c))
      out.push_back({"permissions.commands", in_quotes(c) + ": " + *why});
  }
}

}  // namespace

bool is_hijacking_env_name(std::string_view name) {
  std::string u = upper(name);
  if (std::find(kHijackNames.begin(), kHijackNames.end(), u) != kHijackNames.end()) return true;
  return std::any_of(kHijackPrefixes.begin(), kHijackPrefixes.end(),
                     [&](std::string_view p) { return u.rfind(p, 0) == 0; });
}

bool is_safe_command_token(std::string_view c) {
  if (c.empty()) return false;
  for (unsigned char ch : c) {
    // Non-ASCII bytes belong to (Unicode) letters in kernex's rule; control/punctuation do not.
    if (ch >= 0x80 || std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '/' ||
        ch == '@')
      continue;
    return false;
  }
  std::size_t pos = 0;
  while (pos <= c.size()) {
    std::size_t slash = c.find('/', pos);
    if (slash == std::string_view::npos) slash = c.size();
    if (c.substr(pos, slash - pos) == "..") return false;
    pos = slash + 1;
  }
  if (c[0] == '/') {
    for (std::string_view prefix : {"/usr/", "/opt/", "/bin/", "/sbin/", "/Applications/"}) {
      if (c.rfind(prefix, 0) == 0) return true;
    }
    return false;
  }
  return c.find('/') == std::string_view::npos;
}

bool is_safe_mcp_command(std::string_view c) {
  if (!is_safe_command_token(c)) return false;
  if (c[0] == '/') return true;
  for (std::string_view runner :
       {"npx", "uvx", "uv", "node", "python", "python3", "deno", "bun", "docker"}) {
    if (c == runner) return true;
  }
  return false;
}

bool is_valid_env_name(std::string_view name) {
  if (name.empty()) return false;
  auto first = static_cast<unsigned char>(name[0]);
  if (!(std::isalpha(first) || first == '_') || first >= 0x80) return false;
  return std::all_of(name.begin(), name.end(), [](char ch) {
    auto u = static_cast<unsigned char>(ch);
    return u < 0x80 && (std::isalnum(u) || u == '_');
  });
}

std::vector<Problem> check_toolbox(const Toolbox& t, const Permissions& p) {
  std::vector<Problem> out;
  if (!is_safe_command_token(t.command)) {
    out.push_back(
        {"command",
         "command " + in_quotes(t.command) +
             " is not allowed: expected a program name (letters, digits, - _ . @) or an absolute "
             "path under /usr, /opt, /bin or /sbin"});
  } else if (!p.allows_command(t.command)) {
    out.push_back({"command", "toolbox '" + t.name + "' runs " + in_quotes(t.command) +
                                  ", which is not in the skill's declared permissions.commands " +
                                  commands_list(p) + "; declare it there or remove the toolbox"});
  } else if (auto why = not_a_program(t.command)) {
    out.push_back({"command", in_quotes(t.command) + ": " + *why});
  }
  check_commands_grant_programs(p, out);
  check_args(t.args, out);
  check_env(t.env, out);
  for (const auto& name : t.env_passthrough) {
    if (is_hijacking_env_name(name)) {
      out.push_back(
          {"env_passthrough",
           "passing " + name + " through could hijack what the program executes or loads"});
    } else if (std::find(p.env.begin(), p.env.end(), name) == p.env.end()) {
      out.push_back({"env_passthrough", "toolbox '" + t.name + "' passes " + name +
                                            " through, which is not declared in permissions.env [" +
                                            detail::join(p.env) + "]"});
    }
  }
  if (t.network && p.network.empty()) {
    out.push_back(
        {"network",
         "toolbox '" + t.name +
             "' uses the network (network = true) but the skill declares no permissions.network "
             "hosts"});
  }
  return out;
}

std::vector<Problem> check_mcp_server(const McpServer& s, const Permissions& p) {
  std::vector<Problem> out;
  if (!is_safe_mcp_command(s.command)) {
    out.push_back(
        {"command",
         "MCP server command " + in_quotes(s.command) +
             " is not allowed: expected one of npx, uvx, uv, node, python, python3, deno, bun, "
             "docker or an absolute path under /usr, /opt, /bin or /sbin"});
  } else if (!p.allows_command(s.command)) {
    out.push_back({"command", "MCP server '" + s.name + "' runs " + in_quotes(s.command) +
                                  ", which is not in the skill's declared permissions.commands " +
                                  commands_list(p) + "; declare it there or remove the server"});
  } else if (auto why = not_a_program(s.command)) {
    out.push_back({"command", in_quotes(s.command) + ": " + *why});
  }
  check_commands_grant_programs(p, out);
  check_args(s.args, out);
  check_env(s.env, out);
  return out;
}

std::vector<Problem> check_permissions(const Permissions& p) {
  std::vector<Problem> out;
  for (const auto& name : p.env) {
    if (!is_valid_env_name(name)) {
      out.push_back({"env", in_quotes(name) +
                                " is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"});
    } else if (is_hijacking_env_name(name)) {
      out.push_back(
          {"env", "passing " + name +
                      " to toolboxes could hijack what they execute or load; not allowed"});
    }
  }
  for (const auto& c : p.commands) {
    if (c.empty() || has_control(c))
      out.push_back(
          {"commands", "expected program names or absolute paths, found " + in_quotes(c)});
  }
  for (const auto& h : p.network) {
    if (h.empty() || has_control(h) || h.find_first_of(" \t/") != std::string::npos) {
      out.push_back(
          {"network", "expected host names (e.g. api.github.com), found " + in_quotes(h)});
    }
  }
  return out;
}

void apply_permissions(Toolbox& t, const Permissions& p) {
  t.allowed_commands = p.commands;
  if (t.env_passthrough.empty()) t.env_passthrough = p.env;
  t.network = t.network || !p.network.empty();
}

void apply_permissions(McpServer& s, const Permissions& p) {
  s.allowed_commands = p.commands;
  s.env_passthrough = p.env;
  s.network = !p.network.empty();
}

}  // namespace kernex::skills
