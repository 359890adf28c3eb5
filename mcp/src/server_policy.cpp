#include "server_policy.hpp"

#include <algorithm>
#include <string>

#include <sstream>

#include "kernex/files.hpp"
#include "kernex/sandbox/executable.hpp"
#include "kernex/sandbox/spawn.hpp"

namespace kernex::mcp::detail {
namespace fs = std::filesystem;

namespace {

// "X" from a first line "#!/usr/bin/env X" or "#!/usr/bin/env -S X ...": the program env runs,
// which must be on the allow-list too since Landlock limits every execve.
std::optional<std::string> env_interpreter(const fs::path& script) {
  // The first line only, through the non-blocking regular-file open: a FIFO named as a server's
  // command must not hang the policy check.
  auto head = read_regular_file_head(script, "MCP server command", 4096);
  if (!head) return std::nullopt;
  const std::string line = head->substr(0, head->find('\n'));
  if (!line.starts_with("#!")) return std::nullopt;
  std::istringstream words(line.substr(2));
  std::string program, word;
  words >> program;
  if (fs::path(program).filename() != "env") return std::nullopt;
  while (words >> word) {
    if (word.starts_with('-')) continue;
    if (word.find('=') != std::string::npos) continue;
    return word;
  }
  return std::nullopt;
}

bool under(const fs::path& path, const fs::path& dir) {
  auto rel = path.lexically_relative(dir);
  return !rel.empty() && *rel.begin() != "..";
}

bool inside_system_paths(const fs::path& p) {
  for (const auto& sys : sandbox::system_exec_paths()) {
    if (p == sys || under(p, sys)) return true;
  }
  return false;
}

}  // namespace

Result<sandbox::Policy> build_server_policy(const McpServer& server, const ServerSandbox& sb) {
  sandbox::SandboxProfile profile;
  profile.enforce = sb.enforce;
  if (!sb.workspace.empty()) profile.workspace = sb.workspace;
  if (sb.workspace_layers)
    profile.workspace_overlay = sandbox::WorkspaceOverlay::in(*sb.workspace_layers);
  profile.read_only = sb.read_only;
  profile.read_write = sb.read_write;
  profile.env.passthrough = sb.env_passthrough;
  for (const auto& [name, value] : server.env) profile.env.set[name] = value;
  profile.network.tcp_connect_ports = sb.tcp_ports;
  // Node (and anything built on OpenSSL 3) refuses to start when it cannot read its OpenSSL
  // configuration; the file holds no secrets, unlike the rest of /etc/ssl.
  std::error_code exists_ec;
  if (fs::is_regular_file("/etc/ssl/openssl.cnf", exists_ec))
    profile.read_only.emplace_back("/etc/ssl/openssl.cnf");

  // The allow-list is derived from what the command turns out to be (same search as the sandbox's).
  std::vector<std::string> allowed = sb.allowed_commands;
  std::optional<fs::path> resolved;
  if (server.command.find('/') != std::string::npos) {
    resolved = fs::path(server.command);
  } else {
    for (const auto& dir : profile.search_path) {
      std::error_code ec;
      if (fs::is_regular_file(dir / server.command, ec)) {
        resolved = dir / server.command;
        break;
      }
    }
  }
  // The server's own command and the interpreter its `#!/usr/bin/env X` line runs are always
  // allowed: Landlock limits every execve, so `npx` without `node` could never start.
  auto add = [&](const std::string& c) {
    if (std::find(allowed.begin(), allowed.end(), c) == allowed.end()) allowed.push_back(c);
  };
  add(server.command);
  if (resolved) {
    std::error_code ec;
    const fs::path real = fs::canonical(*resolved, ec);
    if (auto interp = env_interpreter(ec ? *resolved : real)) add(*interp);
  }
  profile.allowed_commands = allowed;
  // The declaring skill's folder is the server's own code (an entry script, node_modules, modules
  // it imports, helpers it runs): readable and executable, never writable, kept read-only by a
  // bind mount even inside the writable workspace.
  if (!server.source_dir.empty()) {
    profile.executable.emplace_back(server.source_dir);
    profile.keep_read_only.emplace_back(server.source_dir);
  }

  // Every command must be a program (check_executable); the sandbox grants EXECUTE on that one
  // file. A node (or other runtime) installed outside /usr, e.g. under ~/.nvm: its prefix must be
  // readable for the runtime's own modules (lib/node_modules holds npm and global packages).
  for (const auto& cmd : allowed) {
    if (cmd.find('/') == std::string::npos) continue;
    auto program = sandbox::check_executable(cmd);
    if (!program && program.error().code == ErrorCode::Io)
      continue;  // not installed: it can't start
    if (!program)
      return fail(ErrorCode::Sandbox, "MCP server '" + server.name + "': command", program.error());
    const fs::path& real = program->path;
    if (inside_system_paths(real)) continue;
    std::error_code ec;
    const fs::path prefix = real.parent_path().parent_path();
    if (fs::is_directory(prefix / "lib" / "node_modules", ec))
      profile.read_only.push_back(prefix / "lib" / "node_modules");
  }
  auto policy = sandbox::PolicyBuilder(std::move(profile)).Build();
  if (!policy) {
    return fail(ErrorCode::Sandbox,
                "MCP server '" + server.name + "': the sandbox policy was refused", policy.error());
  }
  return policy;
}

}  // namespace kernex::mcp::detail
