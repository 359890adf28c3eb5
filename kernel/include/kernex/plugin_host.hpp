// Discovers plugin libraries, reads their descriptors, checks ABI and kind, and creates
// objects that keep their library loaded for as long as they live.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/plugin.hpp"

namespace kernex {

std::string_view to_string(PluginKind kind) noexcept;
std::optional<PluginKind> plugin_kind_from_string(std::string_view name) noexcept;

struct PluginInfo {
  std::filesystem::path path;
  std::optional<PluginKind> kind;  // unset when the descriptor could not be read
  std::string name;
  std::string version;
  std::string description;
  std::uint32_t abi_version = 0;
  std::optional<Error> error;  // why this file can't be used; the others still load
  bool ok() const { return !error.has_value(); }
};

class PluginHost {
 public:
  PluginHost();
  ~PluginHost();
  PluginHost(PluginHost&&) noexcept;
  PluginHost& operator=(PluginHost&&) noexcept;

  // The directories searched by default, in order: $KERNEX_PLUGIN_PATH (':'-separated), then
  // kernex/plugins beside the loaded libkernex (<libdir>/kernex/plugins of the install or of
  // the build tree it runs from; found at run time, so an install can be moved).
  static std::vector<std::filesystem::path> default_dirs();

  // Scans every regular file named *.so in `dirs` (missing dirs are skipped; a dir listed twice
  // or reached again through a symlink is read once) and reads each descriptor. A file that
  // fails is kept with its error. The first plugin of a given kind and name wins; later
  // duplicates are reported as errors.
  static PluginHost discover(const std::vector<std::filesystem::path>& dirs);
  // Loads one file (tests, explicit paths in config).
  Result<PluginInfo> add_file(const std::filesystem::path& path);

  const std::vector<PluginInfo>& plugins() const;
  const PluginInfo* find(PluginKind kind, std::string_view name) const;

  Result<std::shared_ptr<Provider>> create_provider(std::string_view name,
                                                    const Json& config) const;
  Result<std::shared_ptr<MemoryStore>> create_memory(std::string_view name,
                                                     const Json& config) const;
  Result<std::shared_ptr<HookRunner>> create_hook(std::string_view name, const Json& config) const;
  Result<std::shared_ptr<ToolExecutor>> create_toolbox(std::string_view name,
                                                       const Json& config) const;
  Result<std::shared_ptr<Channel>> create_channel(std::string_view name, const Json& config) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kernex
