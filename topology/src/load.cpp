// Finding and reading a TOPOLOGY file: by name under the data dir, or a folder or file path.
#include <sys/stat.h>

#include "kernex/files.hpp"
#include "kernex/topology/topology.hpp"

namespace kernex::topology {
namespace {

bool is_yaml(const std::filesystem::path& file) {
  return file.extension() == ".yaml" || file.extension() == ".yml";
}

bool exists_no_follow(const std::filesystem::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

}  // namespace

Result<Topology> load_file(const std::filesystem::path& file) {
  const auto ext = file.extension();
  if (ext != ".toml" && !is_yaml(file))
    return fail(ErrorCode::Config,
                file.string() + ": a topology file ends in .toml, .yaml or .yml");
  auto text = read_regular_file(file, "topology file", kMaxManifestFileBytes);
  if (!text) return std::unexpected(text.error());
  auto dir = file.parent_path();
  if (dir.empty()) dir = ".";
  return parse(*text, is_yaml(file), file, dir);
}

Result<Topology> load_dir(const std::filesystem::path& dir) {
  for (const char* name : {"TOPOLOGY.toml", "TOPOLOGY.yaml", "TOPOLOGY.yml"}) {
    if (exists_no_follow(dir / name)) return load_file(dir / name);
  }
  return fail(ErrorCode::Config,
              dir.string() + " holds no TOPOLOGY.toml (or TOPOLOGY.yaml / TOPOLOGY.yml)");
}

Result<Topology> resolve(const std::string& name_or_path, const std::filesystem::path& data_dir) {
  if (valid_name(name_or_path)) {
    const auto dir = data_dir / "topologies" / name_or_path;
    if (exists_no_follow(dir) || !exists_no_follow(name_or_path)) {
      auto loaded = load_dir(dir);
      if (loaded && loaded->name != name_or_path) {
        return fail(ErrorCode::Config, loaded->file.string() + ": topology.name is \"" +
                                           loaded->name + "\", but its folder is \"" +
                                           name_or_path + "\"");
      }
      return loaded;
    }
  }
  if (name_or_path.empty() || name_or_path.find('\0') != std::string::npos)
    return fail(ErrorCode::Usage, "expected a topology name or a path");
  std::error_code ec;
  if (std::filesystem::is_directory(name_or_path, ec)) return load_dir(name_or_path);
  return load_file(name_or_path);
}

}  // namespace kernex::topology
