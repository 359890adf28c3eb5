// `kernex doctor`: what this machine and configuration offer the kernel, and what is missing.
// Pure library code so the CLI (and hosts) only render the report.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kernex/config.hpp"
#include "kernex/json.hpp"

namespace kernex {

struct PathStatus {
  std::filesystem::path path;
  bool exists = false;
  bool writable =
      false;  // for a missing path: whether it could be created (nearest parent writable)
};

struct DoctorReport {
  std::string version;         // kernex library version
  std::string kernel_release;  // uname -r

  // Landlock: ABI version from landlock_create_ruleset(NULL, 0, VERSION), else why not.
  std::optional<int> landlock_abi;
  std::string landlock_error;

  // seccomp: filter mode usable (SECCOMP_GET_ACTION_AVAIL), and this process's current mode.
  bool seccomp_available = false;
  std::string seccomp_error;
  std::optional<int> seccomp_mode;  // /proc/self/status "Seccomp:" 0 none, 1 strict, 2 filter

  bool no_new_privs_supported = false;  // prctl(PR_GET_NO_NEW_PRIVS) answers
  bool no_new_privs_set = false;        // already set on this process

  // Configuration: the file read (if any), or why it could not be used.
  std::optional<PathStatus> config_file;
  std::optional<std::string> config_error;
  PathStatus data_dir;
  PathStatus pricing_file;              // config.pricing_file, else default_pricing_file()
  std::vector<PathStatus> plugin_dirs;  // in search order
  std::size_t plugins_found = 0;        // loadable plugin files
  std::size_t plugins_failed = 0;
  std::vector<std::string> plugin_errors;  // "path: cause"

  // One line per thing the kernel would need but can't have here.
  std::vector<std::string> missing;
  bool ok() const { return missing.empty(); }
};

// The plugin directories a kernel built from `config` searches: config.plugin_dirs, then
// PluginHost::default_dirs() (which reads $KERNEX_PLUGIN_PATH).
std::vector<std::filesystem::path> plugin_search_dirs(const Config& config);

// Checks the machine against an already loaded configuration.
DoctorReport diagnose(const Config& config);
// Loads the configuration (`file`, else $KERNEX_CONFIG, else defaults) first. A configuration
// error is recorded in the report and the checks go on with the defaults.
DoctorReport diagnose_config_file(const std::optional<std::filesystem::path>& file);

Json to_json(const DoctorReport& report);
// A few aligned lines for a terminal, ending with the missing items.
std::string to_text(const DoctorReport& report);

}  // namespace kernex
