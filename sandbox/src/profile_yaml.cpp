// SandboxProfile from YAML. Every error names the origin and the key path, e.g.
// "profile.yaml: sandbox.limits.cpu_seconds: expected a non-negative integer".
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include "kernex/files.hpp"
#include "kernex/kernel_files.hpp"
#include "kernex/sandbox/profile.hpp"
#include "profile_schema.hpp"

namespace kernex::sandbox {
namespace {

class Reader {
 public:
  explicit Reader(std::string_view origin) : origin_(origin) {}

  std::unexpected<Error> error(const std::string& key, const std::string& what) const {
    return fail(ErrorCode::Config, origin_ + ": " + key + ": " + what);
  }

  // Every key of `map` is one of `section`'s (config_fields.hpp words the refusal).
  Result<void> check_keys(const YAML::Node& map, const std::string& where,
                          const config::Section& section) const {
    for (const auto& kv : map) {
      if (!kv.first.IsScalar())
        return error(where.empty() ? "(top level)" : where, "keys must be strings");
      const auto key = kv.first.Scalar();
      KERNEX_RETURN_IF_ERROR(
          config::known_key(section, key, config::Where{origin_, 0, where}.child(key)));
    }
    return {};
  }

  Result<std::string> string(const YAML::Node& n, const std::string& key) const {
    if (!n.IsScalar()) return error(key, "expected a string");
    return n.Scalar();
  }

  Result<bool> boolean(const YAML::Node& n, const std::string& key) const {
    bool v = false;
    if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v))
      return error(key, "expected true or false");
    return v;
  }

  Result<std::uint64_t> unsigned_int(const YAML::Node& n, const std::string& key,
                                     std::uint64_t max) const {
    const auto text = n.IsScalar() ? n.Scalar() : std::string();
    if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
      return error(key, "expected a non-negative integer");
    }
    std::uint64_t v = 0;
    for (char c : text) {
      const auto digit = static_cast<std::uint64_t>(c - '0');
      if (v > (max - digit) / 10)
        return error(key, "value out of range (max " + std::to_string(max) + ")");
      v = v * 10 + digit;
    }
    return v;
  }

  Result<std::vector<std::string>> strings(const YAML::Node& n, const std::string& key) const {
    if (!n.IsSequence()) return error(key, "expected a list of strings");
    std::vector<std::string> out;
    for (std::size_t i = 0; i < n.size(); ++i) {
      KERNEX_ASSIGN_OR_RETURN(auto s, string(n[i], key + "[" + std::to_string(i) + "]"));
      out.push_back(s);
    }
    return out;
  }

  Result<std::vector<std::filesystem::path>> paths(const YAML::Node& n,
                                                   const std::string& key) const {
    KERNEX_ASSIGN_OR_RETURN(auto list, strings(n, key));
    std::vector<std::filesystem::path> out;
    for (std::size_t i = 0; i < list.size(); ++i) {
      KERNEX_ASSIGN_OR_RETURN(auto p, path((list)[i], key + "[" + std::to_string(i) + "]"));
      out.push_back(p);
    }
    return out;
  }

  Result<std::filesystem::path> path(const std::string& text, const std::string& key) const {
    if (text.empty() || text.front() != '/')
      return error(key, "expected an absolute path, got '" + text + "'");
    return std::filesystem::path(text);
  }

 private:
  std::string origin_;
};

using Handler = std::function<Result<void>(const YAML::Node&, const std::string&)>;

Result<void> parse_network(const Reader& r, const YAML::Node& n, NetworkPolicy& out) {
  const std::string key = "network";
  if (n.IsScalar()) {
    if (n.Scalar() == "none") return {};
    return r.error(key,
                   "expected 'none' or a mapping {tcp_connect: [ports], unix: bool, listen: bool}");
  }
  if (!n.IsMap())
    return r.error(key,
                   "expected 'none' or a mapping {tcp_connect: [ports], unix: bool, listen: bool}");
  if (auto c = r.check_keys(n, key, schema::kNetwork); !c) return c;
  if (n["tcp_connect"]) {
    const auto& ports = n["tcp_connect"];
    if (!ports.IsSequence()) return r.error(key + ".tcp_connect", "expected a list of ports");
    for (std::size_t i = 0; i < ports.size(); ++i) {
      const auto k = key + ".tcp_connect[" + std::to_string(i) + "]";
      KERNEX_ASSIGN_OR_RETURN(auto port, r.unsigned_int(ports[i], k, 65535));
      if (port == 0) return r.error(k, "port 0 is not a port");
      out.tcp_connect_ports.push_back(static_cast<std::uint16_t>(port));
    }
  }
  for (auto [name, slot] : {std::pair{"unix", &out.unix_sockets}, {"listen", &out.listen}}) {
    if (!n[name]) continue;
    KERNEX_ASSIGN_OR_RETURN(auto b, r.boolean(n[name], key + "." + name));
    *slot = b;
  }
  return {};
}

Result<void> parse_env(const Reader& r, const YAML::Node& n, EnvPolicy& out) {
  const std::string key = "env";
  if (!n.IsMap())
    return r.error(key, "expected a mapping {base, passthrough, set, locale, malloc_huge_pages}");
  if (auto c = r.check_keys(n, key, schema::kEnv); !c) return c;
  if (n["base"]) {
    KERNEX_ASSIGN_OR_RETURN(auto v, r.strings(n["base"], key + ".base"));
    out.base = v;
  }
  if (n["passthrough"]) {
    KERNEX_ASSIGN_OR_RETURN(auto v, r.strings(n["passthrough"], key + ".passthrough"));
    out.passthrough = v;
  }
  if (n["locale"]) {
    KERNEX_ASSIGN_OR_RETURN(auto v, r.boolean(n["locale"], key + ".locale"));
    out.pass_locale = v;
  }
  if (n["malloc_huge_pages"]) {
    KERNEX_ASSIGN_OR_RETURN(auto v, r.boolean(n["malloc_huge_pages"], key + ".malloc_huge_pages"));
    out.malloc_huge_pages = v;
  }
  if (n["set"]) {
    const auto& set = n["set"];
    if (!set.IsMap()) return r.error(key + ".set", "expected a mapping of NAME: value");
    for (const auto& kv : set) {
      KERNEX_ASSIGN_OR_RETURN(auto name, r.string(kv.first, key + ".set"));
      KERNEX_ASSIGN_OR_RETURN(auto value, r.string(kv.second, key + ".set." + name));
      out.set[name] = value;
    }
  }
  return {};
}

Result<void> parse_limits(const Reader& r, const YAML::Node& n, ResourceLimits& out) {
  const std::string key = "limits";
  if (!n.IsMap()) return r.error(key, "expected a mapping");
  if (auto c = r.check_keys(n, key, schema::kLimits); !c) return c;
  const auto max = std::numeric_limits<std::uint64_t>::max() / 2;
  for (auto [name, slot] : {std::pair{"cpu_seconds", &out.cpu_seconds},
                            {"address_space", &out.address_space_bytes},
                            {"processes", &out.processes},
                            {"file_size", &out.file_size_bytes},
                            {"open_files", &out.open_files}}) {
    if (!n[name]) continue;
    KERNEX_ASSIGN_OR_RETURN(auto v, r.unsigned_int(n[name], key + "." + name, max));
    *slot = v;
  }
  return {};
}

// Handlers that read one key's value into a field of the profile.
struct Into {
  const Reader& r;

  Handler paths(std::vector<std::filesystem::path>& dst) const {
    return [&r = r, &dst](const YAML::Node& n, const std::string& k) -> Result<void> {
      KERNEX_ASSIGN_OR_RETURN(auto v, r.paths(n, k));
      dst = v;
      return {};
    };
  }
  Handler boolean(bool& dst) const {
    return [&r = r, &dst](const YAML::Node& n, const std::string& k) -> Result<void> {
      KERNEX_ASSIGN_OR_RETURN(auto v, r.boolean(n, k));
      dst = v;
      return {};
    };
  }
  Handler path(std::optional<std::filesystem::path>& dst) const {
    return [&r = r, &dst](const YAML::Node& n, const std::string& k) -> Result<void> {
      KERNEX_ASSIGN_OR_RETURN(auto s, r.string(n, k));
      KERNEX_ASSIGN_OR_RETURN(auto v, r.path(s, k));
      dst = v;
      return {};
    };
  }
  Handler size(std::size_t& dst) const {
    return [&r = r, &dst](const YAML::Node& n, const std::string& k) -> Result<void> {
      KERNEX_ASSIGN_OR_RETURN(auto v,
                              r.unsigned_int(n, k, std::numeric_limits<std::uint32_t>::max()));
      dst = static_cast<std::size_t>(v);
      return {};
    };
  }
  Handler strings(std::vector<std::string>& dst) const {
    return [&r = r, &dst](const YAML::Node& n, const std::string& k) -> Result<void> {
      KERNEX_ASSIGN_OR_RETURN(auto v, r.strings(n, k));
      dst = v;
      return {};
    };
  }
  // Seconds in (0, 86400], fractions rounded up to the millisecond.
  Handler timeout(std::chrono::milliseconds& dst) const {
    return [&r = r, &dst](const YAML::Node& n, const std::string& k) -> Result<void> {
      double seconds = 0;
      if (!n.IsScalar() || !YAML::convert<double>::decode(n, seconds) || !std::isfinite(seconds) ||
          seconds <= 0 || seconds > 86400) {
        return r.error(k, "expected a number of seconds in (0, 86400]");
      }
      dst = std::chrono::milliseconds(static_cast<long long>(std::ceil(seconds * 1000)));
      return {};
    };
  }
};

// Every top-level key of a profile and what reads it into `p`.
std::map<std::string, Handler> profile_handlers(const Reader& r, SandboxProfile& p) {
  const Into into{r};
  return {
      {"enforce", into.boolean(p.enforce)},
      {"system_defaults", into.boolean(p.system_defaults)},
      {"private_tmp", into.boolean(p.private_tmp)},
      {"watch_files", into.boolean(p.watch_files)},
      {"git_writes", into.boolean(p.git_writes)},
      {"workspace", into.path(p.workspace)},
      {"working_dir", into.path(p.working_dir)},
      {"read_only", into.paths(p.read_only)},
      {"read_write", into.paths(p.read_write)},
      {"executable", into.paths(p.executable)},
      {"keep_read_only", into.paths(p.keep_read_only)},
      {"protected", into.paths(p.protected_paths)},
      {"search_path", into.paths(p.search_path)},
      {"stdout_cap", into.size(p.stdout_cap)},
      {"stderr_cap", into.size(p.stderr_cap)},
      {"network",
       [&](const YAML::Node& n, const std::string&) { return parse_network(r, n, p.network); }},
      {"env", [&](const YAML::Node& n, const std::string&) { return parse_env(r, n, p.env); }},
      {"limits",
       [&](const YAML::Node& n, const std::string&) { return parse_limits(r, n, p.limits); }},
      {"allowed_commands", into.strings(p.allowed_commands)},
      {"timeout", into.timeout(p.timeout)},
  };
}

// The document (or its one `sandbox` key) -> known keys only -> each key through its handler.
Result<SandboxProfile> parse_root(const Reader& r, YAML::Node root) {
  SandboxProfile p;
  if (!root || root.IsNull()) return p;
  if (!root.IsMap()) return r.error("(top level)", "expected a mapping");
  if (root.size() == 1 && root["sandbox"]) root = root["sandbox"];
  if (!root.IsMap()) return r.error("sandbox", "expected a mapping");
  const auto handlers = profile_handlers(r, p);
  if (auto c = r.check_keys(root, "", schema::kProfile); !c) return std::unexpected(c.error());
  for (const auto& kv : root) {
    const auto key = kv.first.Scalar();
    auto it = handlers.find(key);
    if (it == handlers.end()) return r.error(key, "unknown key");  // a key the table lacks
    KERNEX_RETURN_IF_ERROR(it->second(kv.second, key));
  }
  return p;
}

}  // namespace

Result<SandboxProfile> SandboxProfile::from_yaml(std::string_view text, std::string_view origin) {
  Reader reader(origin);
  try {
    return parse_root(reader, YAML::Load(std::string(text)));
  } catch (const YAML::Exception& e) {
    return fail(ErrorCode::Parse, std::string(origin) + ": invalid YAML: " + e.what());
  }
}

Result<SandboxProfile> SandboxProfile::load_yaml_file(const std::filesystem::path& file) {
  KERNEX_ASSIGN_OR_RETURN(auto text, read_regular_file(file, "sandbox profile"));
  // A profile the kernel reads is a kernel file: a tool that could rewrite it would choose its own
  // sandbox next time.
  register_kernel_file(file, KernelFileAccess::ReadOnly, "sandbox profile");
  return from_yaml(text, file.string());
}

}  // namespace kernex::sandbox
