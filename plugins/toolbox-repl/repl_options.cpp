#include "repl_options.hpp"

#include <cmath>
#include <set>

#include "kernex/number.hpp"

namespace kernex::repl {
namespace {

Error bad(const std::string& key, const std::string& expected) {
  return Error{ErrorCode::Config, "toolbox-repl: `" + key + "` " + expected};
}

Result<std::uint64_t> positive(const Json& v, const std::string& key, std::uint64_t max) {
  if (auto problem = uint_problem(v, 1, max)) return std::unexpected(bad(key, *problem));
  return v.get<std::uint64_t>();
}

// The options shared with every sandboxed toolbox (workspace, profile, protect), for
// ToolboxRunOptions; any key that is neither shared nor the REPL's own is refused.
Result<Json> shared_options(const Json& config) {
  static const std::set<std::string> shared = {"workspace", "profile", "protect"};
  static const std::set<std::string> own = {"timeout",     "max_output",   "memory_mb",
                                            "cpu_seconds", "max_sessions", "pool_size",
                                            "offer",       "python",       "tool_result_max_bytes",
                                            "data_dir",    "tools"};
  Json run_config = Json::object();
  if (!config.is_object()) return run_config;
  for (const auto& [key, value] : config.items()) {
    if (shared.contains(key)) {
      run_config[key] = value;
    } else if (!own.contains(key)) {
      return std::unexpected(
          bad(key,
              "is not an option (expected workspace, profile, protect, timeout, max_output, "
              "memory_mb, cpu_seconds, max_sessions, pool_size, offer, python, "
              "tool_result_max_bytes, data_dir, tools)"));
    }
  }
  return run_config;
}

// What a call may take and return: its timeout (which cpu_seconds defaults to), the output kept,
// what tools return to code, and where saved state goes.
Result<void> read_calls(const Json& c, ReplOptions& o) {
  if (auto it = c.find("timeout"); it != c.end()) {
    if (auto problem = number_problem(*it, 0.001, 86400))
      return std::unexpected(bad("timeout", "(seconds): " + *problem));
    o.timeout = seconds_to_ms(it->get<double>());
  }
  o.cpu_seconds =
      static_cast<std::uint64_t>(std::ceil(static_cast<double>(o.timeout.count()) / 1000.0));
  if (auto it = c.find("max_output"); it != c.end()) {
    KERNEX_ASSIGN_OR_RETURN(o.max_output, positive(*it, "max_output", 1ull << 30));
  }
  if (auto it = c.find("tool_result_max_bytes"); it != c.end()) {
    KERNEX_ASSIGN_OR_RETURN(o.tool_result_max_bytes,
                            positive(*it, "tool_result_max_bytes", 1ull << 32));
  }
  if (auto it = c.find("data_dir"); it != c.end()) {
    if (!it->is_string() || it->get<std::string>().empty() ||
        !std::filesystem::path(it->get<std::string>()).is_absolute())
      return std::unexpected(bad("data_dir", "must be an absolute path (a string)"));
    o.data_dir = std::filesystem::path(it->get<std::string>()).lexically_normal();
  }
  return {};
}

// The workers: their limits and number, when and which tools are offered, which python.
Result<void> read_workers(const Json& c, ReplOptions& o) {
  if (auto it = c.find("memory_mb"); it != c.end()) {
    KERNEX_ASSIGN_OR_RETURN(o.memory_mb, positive(*it, "memory_mb", 1ull << 20));
  }
  if (auto it = c.find("cpu_seconds"); it != c.end()) {
    KERNEX_ASSIGN_OR_RETURN(o.cpu_seconds, positive(*it, "cpu_seconds", 86400));
  }
  if (auto it = c.find("max_sessions"); it != c.end()) {
    KERNEX_ASSIGN_OR_RETURN(o.max_sessions, positive(*it, "max_sessions", 1024));
  }
  if (auto it = c.find("pool_size"); it != c.end()) {
    if (auto problem = uint_problem(*it, 0, 64)) return std::unexpected(bad("pool_size", *problem));
    o.pool_size = it->get<std::size_t>();
  }
  if (auto it = c.find("offer"); it != c.end()) {
    if (*it != "always" && *it != "when_allowed")
      return std::unexpected(bad("offer", "must be \"always\" or \"when_allowed\""));
    o.offer_always = *it == "always";
  }
  if (auto it = c.find("tools"); it != c.end()) {
    static const std::set<std::string> names = {"load_context", "list_vars", "peek",
                                                "scan",         "eval_code", "provide_answers"};
    const char* expected =
        "must be a non-empty list of the REPL's tools (load_context, list_vars, peek, scan, "
        "eval_code, provide_answers)";
    if (!it->is_array() || it->empty()) return std::unexpected(bad("tools", expected));
    for (const auto& name : *it) {
      if (!name.is_string() || !names.contains(name.get<std::string>()))
        return std::unexpected(bad("tools", expected));
      o.tools.push_back(name.get<std::string>());
    }
  }
  if (auto it = c.find("python"); it != c.end()) {
    if (!it->is_string() || it->get<std::string>().empty())
      return std::unexpected(bad("python", "must be a program name"));
    o.python = it->get<std::string>();
  }
  return {};
}

}  // namespace

Result<ReplOptions> ReplOptions::from_json(const Json& config) {
  if (!config.is_null() && !config.is_object())
    return fail(ErrorCode::Config, "toolbox-repl: config must be an object");
  KERNEX_ASSIGN_OR_RETURN(auto run_config, shared_options(config));
  auto run = sandbox::ToolboxRunOptions::from_json(run_config, "toolbox-repl");
  if (!run) return std::unexpected(run.error());
  ReplOptions o;
  o.run = std::move(*run);
  const Json c = config.is_object() ? config : Json::object();
  KERNEX_RETURN_IF_ERROR(read_calls(c, o));
  KERNEX_RETURN_IF_ERROR(read_workers(c, o));
  return o;
}

sandbox::SandboxProfile ReplOptions::profile(const std::vector<std::string>& grants,
                                             const sandbox::CallWorkspace& where) const {
  Toolbox worker{
      "repl", "Python REPL worker", Json{{"type", "object"}}, python, {}, {}, false, {}, {python},
      {}};
  sandbox::SandboxProfile p = sandbox::toolbox_profile(worker, run, where);
  for (const auto& g : grants) p.read_only.emplace_back(g);
  p.network = {};
  p.limits.address_space_bytes = memory_mb << 20;
  // RLIMIT_CPU counts a worker's whole life; the worker lowers its soft limit to "used so far +
  // cpu_seconds" before each call, under this hard cap.
  p.limits.cpu_seconds = std::max<std::uint64_t>(cpu_seconds * 64, 3600);
  p.env.malloc_huge_pages = true;
  p.env.set["KERNEX_REPL_OUTPUT_CAP"] = std::to_string(max_output);
  p.env.set["KERNEX_REPL_CPU_SECONDS"] = std::to_string(cpu_seconds);
  return p;
}

}  // namespace kernex::repl
