// `kernex sandbox exec`: run any command under a sandbox profile and report the result; and the
// sandbox part of `kernex doctor` (the kernel library must not link the sandbox, so it lives here).
#include <cmath>
#include <cstring>
#include <iostream>
#include <iterator>
#include <memory>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "kernex/config.hpp"
#include "kernex/sandbox/spawn.hpp"
#include "kernex/sandbox/toolbox.hpp"

namespace kernex::cli {

namespace {

namespace sb = kernex::sandbox;

struct SandboxExecArgs {
  std::optional<std::string> profile;
  std::optional<std::string> workspace;
  std::vector<std::uint16_t> allow_net;
  std::vector<std::string> env;
  std::optional<double> timeout;
  bool json = false;
  bool stdin_input = false;
  std::vector<std::string> command;
};

long long micros(std::chrono::microseconds us) { return static_cast<long long>(us.count()); }

}  // namespace

Json result_json(const sandbox::SpawnResult& r) {
  return Json{{"executable", r.executable},
              {"exit_code", r.term_signal == 0 && !r.timed_out ? Json(r.exit_code) : Json(nullptr)},
              {"signal", r.term_signal != 0 ? Json(r.term_signal) : Json(nullptr)},
              {"timed_out", r.timed_out},
              {"success", r.success()},
              {"stdout", r.stdout_data},
              {"stderr", r.stderr_data},
              {"stdout_truncated", r.stdout_truncated},
              {"stderr_truncated", r.stderr_truncated},
              {"wall_time_us", micros(r.wall_time)},
              {"cpu_time_us", micros(r.cpu_time)},
              {"peak_rss_kb", r.peak_rss_kb ? Json(*r.peak_rss_kb) : Json(nullptr)},
              {"sandboxed", r.sandboxed}};
}

Json status_json(const sandbox::PolicyStatus& s) {
  Json ro = Json::array();
  for (const auto& p : s.read_only_in_writable) ro.push_back(p.string());
  return Json{{"enforced", s.enforced},
              {"landlock_abi", s.landlock_abi},
              {"filesystem", s.filesystem},
              {"tcp_ports", s.tcp},
              {"signal_scoping", s.signal_scope},
              {"abstract_unix_scoping", s.abstract_unix_scope},
              {"seccomp", s.seccomp},
              {"read_only_in_writable", ro},
              {"warnings", s.warnings}};
}

// What the default profile enforces on this machine, or why it can't be built.
Json sandbox_doctor_json() {
  auto policy = sb::PolicyBuilder().Build();
  if (!policy) {
    return Json{{"enforced", false},
                {"landlock_abi", sb::landlock_abi()},
                {"error", policy.error().describe()}};
  }
  Json out = status_json(policy->status());
  out["protections"] = sandbox_protections_json(policy->status());
  return out;
}

std::string sandbox_doctor_text() {
  const Json s = sandbox_doctor_json();
  auto yes = [&](const char* key) { return s.value(key, false) ? "yes" : "no"; };
  std::string out = "\nsandbox (default profile)\n";
  if (s.contains("error")) {
    out += "  enforced          no: " + s.at("error").get<std::string>() + "\n";
    return out;
  }
  out += std::string("  enforced          ") + yes("enforced") + "\n";
  out += "  landlock          ABI " + std::to_string(s.at("landlock_abi").get<int>()) +
         ", filesystem rules " + yes("filesystem") + ", TCP port rules " + yes("tcp_ports") + "\n";
  out += std::string("  scoping           signals ") + yes("signal_scoping") +
         ", abstract unix sockets " + yes("abstract_unix_scoping") + "\n";
  out +=
      std::string("  seccomp           ") + yes("seccomp") +
      " (no sockets by default, no ptrace/mount/unshare/bpf/io_uring/keyctl/perf/kexec/modules)\n";
  out += "  capabilities      all dropped; no_new_privs; own session; parent-death signal\n";
  out += sandbox_protections_text(s.at("protections"));
  for (const auto& w : s.at("warnings"))
    out += "  warning           " + w.get<std::string>() + "\n";
  return out;
}

namespace {

int sandbox_exec(const std::string& config_file, const SandboxExecArgs& args) {
  // Loading the config registers the kernel's files (the config, what it names, the data dir),
  // which the policy keeps out of the command's reach even inside the workspace.
  auto config = Config::load(
      config_file.empty() ? std::nullopt : std::optional<std::filesystem::path>(config_file));
  if (!config) return report(config.error());
  sb::SandboxProfile profile;
  if (args.profile) {
    auto loaded = sb::SandboxProfile::load_yaml_file(*args.profile);
    if (!loaded) return report(loaded.error());
    profile = std::move(*loaded);
  }
  std::error_code ec;
  if (args.workspace) {
    profile.workspace = std::filesystem::absolute(*args.workspace, ec).lexically_normal();
  } else if (!profile.workspace) {
    profile.workspace = std::filesystem::current_path(ec);
  }
  for (auto port : args.allow_net) {
    if (port == 0)
      return report(Error(ErrorCode::Usage, "--allow-net: expected a TCP port 1-65535"));
    profile.network.tcp_connect_ports.push_back(port);
  }
  for (const auto& name : args.env) profile.env.passthrough.push_back(name);
  if (args.timeout) {
    if (!std::isfinite(*args.timeout) || *args.timeout <= 0 || *args.timeout > 86400) {
      return report(Error(ErrorCode::Usage, "--timeout: expected seconds in (0, 86400]"));
    }
    profile.timeout = std::chrono::milliseconds(std::max(1LL, std::llround(*args.timeout * 1000)));
  }
  auto policy = sb::PolicyBuilder(std::move(profile)).Build();
  if (!policy) return report(policy.error());
  sb::Command cmd;
  cmd.argv = args.command;
  if (args.stdin_input) {
    cmd.stdin_data.assign(std::istreambuf_iterator<char>(std::cin), {});
  }
  auto result = sb::spawn(*policy, cmd);
  if (!result) return report(result.error());

  if (args.json) {
    Json out = result_json(*result);
    out["sandbox"] = status_json(policy->status());
    std::cout << out.dump(-1, ' ', false, Json::error_handler_t::replace) << '\n';
  } else {
    std::cout << result->stdout_data;
    std::cerr << result->stderr_data;
  }
  std::cout.flush();
  if (result->success()) return kExitOk;
  if (result->timed_out) {
    std::cerr << "kernex: sandbox: command timed out after "
              << policy->profile().timeout.count() / 1000.0 << "s and was killed\n";
  } else if (result->term_signal != 0) {
    std::cerr << "kernex: sandbox: command killed by signal " << result->term_signal << " ("
              << ::strsignal(result->term_signal) << ")\n";
  } else {
    std::cerr << "kernex: sandbox: command exited with status " << result->exit_code << '\n';
  }
  return kExitTool;
}

}  // namespace

CommandRun setup_sandbox(Command sandbox, std::string& config) {
  auto args = std::make_shared<SandboxExecArgs>();
  sandbox.require_subcommand();
  Command exec = sandbox.add_subcommand("exec",
                                        "Run CMD ARGS... under a sandbox profile and report its "
                                        "output and exit status (use -- before CMD)");
  exec.footer(kExitCodeHelp);
  add_config_option(exec, config,
                    "kernex.yaml to read (its files and data dir are kept from the command)");
  exec.add_option("--profile", args->profile,
                  "YAML file with a sandbox profile (default: the built-in profile)")
      .type_name("FILE");
  exec.add_option("--workspace", args->workspace,
                  "read-write working directory (default: the current directory)")
      .type_name("DIR");
  exec.add_option("--allow-net", args->allow_net, "allow TCP connections to this port (repeatable)")
      .check(uint_in(1, 65535))
      .allow_extra_args(false)
      .type_name("PORT");
  exec.add_option("--env", args->env, "pass this environment variable through (repeatable)")
      .allow_extra_args(false)
      .type_name("NAME");
  exec.add_option("--timeout", args->timeout,
                  "seconds before the command's process group is killed")
      .check(number_in(0.001, 86400))
      .type_name("S");
  exec.add_flag("--stdin", args->stdin_input, "pass this program's standard input to the command");
  exec.add_flag("--json", args->json,
                "print the result (exit status, output, times, protections) as JSON");
  exec.add_option("command", args->command, "the command and its arguments")
      .required()
      .type_name("CMD ARGS...");
  return [args](const ConfigFile& config) { return sandbox_exec(config.value_or(""), *args); };
}

}  // namespace kernex::cli
