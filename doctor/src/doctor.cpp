#include "kernex/doctor.hpp"

#include <fcntl.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

#include "kernex/plugin_host.hpp"
#include "kernex/sandbox/policy.hpp"

namespace kernex {

namespace fs = std::filesystem;

namespace {

// The first Landlock ABI with TCP bind/connect rules.
constexpr int kLandlockNetworkAbi = 4;

void probe_landlock(DoctorReport& r) {
  auto abi = sandbox::probe_landlock_abi();
  if (abi) {
    r.landlock_abi = *abi;
  } else {
    r.landlock_error = abi.error().message;
  }
}

// "Key:\tvalue" lines of /proc/self/status, for the two we report.
std::optional<int> proc_status_field(std::string_view key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 &&
        line[key.size()] == ':') {
      try {
        return std::stoi(line.substr(key.size() + 1));
      } catch (const std::exception&) {
        return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

void probe_seccomp(DoctorReport& r) {
  r.seccomp_mode = proc_status_field("Seccomp");
#ifdef SYS_seccomp
  std::uint32_t action = SECCOMP_RET_ERRNO;  // the action our filters use
  if (syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) == 0) {
    r.seccomp_available = true;
    return;
  }
  const int e = errno;
  if (e == EOPNOTSUPP) {
    r.seccomp_error = "seccomp filters cannot return errors (SECCOMP_RET_ERRNO unsupported)";
    return;
  }
  if (e != EINVAL && e != ENOSYS) {
    r.seccomp_error = std::string("seccomp(SECCOMP_GET_ACTION_AVAIL) failed: ") + std::strerror(e);
    return;
  }
#endif
  // Kernels before 4.14 lack GET_ACTION_AVAIL; PR_GET_SECCOMP still tells whether seccomp exists.
  if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0) {
    r.seccomp_available = true;
  } else {
    r.seccomp_error =
        std::string("the running kernel has no seccomp (") + std::strerror(errno) + ")";
  }
}

void probe_no_new_privs(DoctorReport& r) {
  // Only read: setting it is irreversible for this process.
  const int v = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
  r.no_new_privs_supported = v >= 0;
  r.no_new_privs_set = v == 1;
}

bool writable_dir(const fs::path& p) {
  return faccessat(AT_FDCWD, p.c_str(), W_OK | X_OK, AT_EACCESS) == 0;
}

PathStatus dir_status(const fs::path& path) {
  PathStatus s{path, false, false};
  std::error_code ec;
  s.exists = fs::exists(path, ec);
  if (s.exists) {
    s.writable = fs::is_directory(path, ec) && writable_dir(path);
    return s;
  }
  // Could it be created? Look for the nearest existing ancestor.
  fs::path parent = fs::absolute(path, ec).parent_path();
  while (!parent.empty() && !fs::exists(parent, ec)) {
    if (parent == parent.parent_path()) break;
    parent = parent.parent_path();
  }
  s.writable = !parent.empty() && fs::is_directory(parent, ec) && writable_dir(parent);
  return s;
}

PathStatus file_status(const fs::path& path) {
  std::error_code ec;
  const bool exists = fs::is_regular_file(path, ec);
  return PathStatus{path, exists, exists && access(path.c_str(), W_OK) == 0};
}

void check_plugins(const Config& config, DoctorReport& r) {
  const auto dirs = plugin_search_dirs(config);
  for (const auto& d : dirs) r.plugin_dirs.push_back(dir_status(d));

  const PluginHost host = PluginHost::discover(dirs);
  for (const auto& info : host.plugins()) {
    if (info.ok()) {
      ++r.plugins_found;
    } else {
      ++r.plugins_failed;
      r.plugin_errors.push_back(info.path.string() + ": " + info.error->describe());
    }
  }
  if (r.plugins_found == 0) {
    std::string where;
    for (const auto& d : dirs) where += (where.empty() ? "" : ", ") + d.string();
    r.missing.push_back("no loadable plugins in the plugin directories (" +
                        (where.empty() ? "none" : where) +
                        "); set plugin_dirs or KERNEX_PLUGIN_PATH");
  }
  for (const auto& e : r.plugin_errors) r.missing.push_back("plugin failed to load: " + e);

  auto need = [&](PluginKind kind, const std::string& name, std::string_view what) {
    if (!name.empty() && host.find(kind, name) == nullptr)
      r.missing.push_back(std::string(what) + " plugin `" + name + "` (configured) was not found");
  };
  if (config.provider.name.empty()) {
    r.missing.push_back(
        "no default provider: set `provider:` in kernex.yaml or pass --provider to `kernex run`");
  } else {
    need(PluginKind::Provider, config.provider.name, "provider");
  }
  if (config.memory) need(PluginKind::Memory, config.memory->name, "memory");
  for (const auto& h : config.hooks) need(PluginKind::Hook, h.name, "hook");
  for (const auto& t : config.toolboxes.value_or(std::vector<PluginRef>{}))
    need(PluginKind::Toolbox, t.name, "toolbox");
}

Json path_json(const PathStatus& s) {
  return Json{{"path", s.path.string()}, {"exists", s.exists}, {"writable", s.writable}};
}

template <class T>
Json opt_json(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}

std::string yes_no(bool b) { return b ? "yes" : "no"; }

}  // namespace

std::vector<fs::path> plugin_search_dirs(const Config& config) {
  std::vector<fs::path> dirs = config.plugin_dirs;
  for (auto& d : PluginHost::default_dirs()) dirs.push_back(std::move(d));
  return dirs;
}

DoctorReport diagnose(const Config& config) {
  DoctorReport r;
  r.version = KERNEX_VERSION;
  if (utsname u{}; uname(&u) == 0) r.kernel_release = u.release;

  probe_landlock(r);
  probe_seccomp(r);
  probe_no_new_privs(r);

  if (!r.landlock_abi) {
    r.missing.push_back("Landlock: " + r.landlock_error +
                        "; tools cannot be confined to their directories");
  } else if (*r.landlock_abi < kLandlockNetworkAbi) {
    r.missing.push_back("Landlock ABI " + std::to_string(*r.landlock_abi) +
                        " has no network rules (needs ABI " + std::to_string(kLandlockNetworkAbi) +
                        "); tool network access falls back to seccomp");
  }
  if (!r.seccomp_available) r.missing.push_back("seccomp: " + r.seccomp_error);
  if (!r.no_new_privs_supported)
    r.missing.push_back("no_new_privs: not supported by the running kernel");

  if (config.source) r.config_file = file_status(*config.source);
  r.data_dir = dir_status(config.data_dir);
  if (!r.data_dir.writable) {
    r.missing.push_back(
        "data dir " + config.data_dir.string() +
        (r.data_dir.exists ? " is not writable" : " does not exist and cannot be created"));
  }
  r.pricing_file = file_status(config.pricing_file.value_or(default_pricing_file()));
  if (!r.pricing_file.exists)
    r.missing.push_back("pricing table " + r.pricing_file.path.string() +
                        " not found; costs will read 0");
  if (config.permissions_file && !file_status(*config.permissions_file).exists)
    r.missing.push_back("permissions file " + config.permissions_file->string() + " not found");

  check_plugins(config, r);
  return r;
}

DoctorReport diagnose_config_file(const std::optional<fs::path>& file) {
  auto loaded = Config::load(file);
  if (loaded) return diagnose(*loaded);

  DoctorReport r = diagnose(Config::defaults());
  r.config_error = loaded.error().describe();
  if (file) r.config_file = file_status(*file);
  r.missing.insert(r.missing.begin(), "config: " + *r.config_error);
  return r;
}

Json to_json(const DoctorReport& r) {
  Json plugin_dirs = Json::array();
  for (const auto& d : r.plugin_dirs) plugin_dirs.push_back(path_json(d));
  return Json{
      {"version", r.version},
      {"kernel_release", r.kernel_release},
      {"landlock",
       {{"available", r.landlock_abi.has_value()},
        {"abi", opt_json(r.landlock_abi)},
        {"error", r.landlock_abi ? Json(nullptr) : Json(r.landlock_error)}}},
      {"seccomp",
       {{"available", r.seccomp_available},
        {"mode", opt_json(r.seccomp_mode)},
        {"error", r.seccomp_available ? Json(nullptr) : Json(r.seccomp_error)}}},
      {"no_new_privs", {{"supported", r.no_new_privs_supported}, {"set", r.no_new_privs_set}}},
      {"config",
       {{"file", r.config_file ? path_json(*r.config_file) : Json(nullptr)},
        {"error", opt_json(r.config_error)}}},
      {"data_dir", path_json(r.data_dir)},
      {"pricing_file", path_json(r.pricing_file)},
      {"plugin_dirs", std::move(plugin_dirs)},
      {"plugins",
       {{"found", r.plugins_found}, {"failed", r.plugins_failed}, {"errors", r.plugin_errors}}},
      {"missing", r.missing},
      {"ok", r.ok()},
  };
}

std::string to_text(const DoctorReport& r) {
  std::ostringstream out;
  auto row = [&](std::string_view label, const std::string& value) {
    out << label << std::string(label.size() < 14 ? 14 - label.size() : 1, ' ') << value << '\n';
  };
  row("kernex", r.version + (r.kernel_release.empty() ? "" : " on Linux " + r.kernel_release));
  row("landlock", r.landlock_abi ? "ABI " + std::to_string(*r.landlock_abi)
                                 : "unavailable: " + r.landlock_error);
  std::string seccomp = r.seccomp_available ? "available" : "unavailable: " + r.seccomp_error;
  if (r.seccomp_mode) seccomp += " (this process: mode " + std::to_string(*r.seccomp_mode) + ")";
  row("seccomp", seccomp);
  row("no_new_privs", r.no_new_privs_supported
                          ? std::string("supported") + (r.no_new_privs_set ? " (set)" : "")
                          : "unsupported");
  if (r.config_error) {
    row("config", "error: " + *r.config_error);
  } else if (r.config_file) {
    row("config", r.config_file->path.string());
  } else {
    row("config", "none (defaults; pass --config or set KERNEX_CONFIG)");
  }
  row("data dir", r.data_dir.path.string() + " (exists: " + yes_no(r.data_dir.exists) +
                      ", writable: " + yes_no(r.data_dir.writable) + ")");
  row("pricing", r.pricing_file.path.string() + (r.pricing_file.exists ? "" : " (missing)"));
  if (r.plugin_dirs.empty())
    row("plugin dirs", "none");
  else
    out << "plugin dirs\n";
  for (const auto& d : r.plugin_dirs)
    out << "  " << d.path.string() << " (exists: " << yes_no(d.exists) << ")\n";
  row("plugins",
      std::to_string(r.plugins_found) + " found, " + std::to_string(r.plugins_failed) + " failed");
  if (r.missing.empty()) {
    out << "everything the kernel needs is here\n";
  } else {
    out << "missing:\n";
    for (const auto& m : r.missing) out << "  - " << m << '\n';
  }
  return out.str();
}

}  // namespace kernex
