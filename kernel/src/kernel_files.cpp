#include "kernex/kernel_files.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>

namespace kernex {
namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

std::vector<KernelFile>& registry() {
  static std::vector<KernelFile> files;
  return files;
}

// Path -> its place in registry(): a lookup per registration, not a scan (10 000 skills register
// 20 000 folders).
std::unordered_map<std::string, std::size_t>& registry_index() {
  static std::unordered_map<std::string, std::size_t> index;
  return index;
}

std::vector<ToolArea>& areas() {
  static std::vector<ToolArea> list;
  return list;
}

std::atomic<std::uint64_t> g_generation{0};

// Absolute and lexically normal, without a trailing separator; empty when it can't be made
// absolute.
std::filesystem::path normal_absolute(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  if (ec) return {};
  absolute = absolute.lexically_normal();
  if (absolute.has_relative_path() && absolute.filename().empty())
    absolute = absolute.parent_path();  // "dir/"
  return absolute;
}

}  // namespace

void register_kernel_file(const std::filesystem::path& path, KernelFileAccess access,
                          std::string why) {
  if (path.empty()) return;
  const std::filesystem::path absolute = normal_absolute(path);
  if (absolute.empty()) return;
  std::lock_guard lock(registry_mutex());
  auto& files = registry();
  auto [at, added] = registry_index().try_emplace(absolute.string(), files.size());
  auto it = added ? files.end() : files.begin() + static_cast<std::ptrdiff_t>(at->second);
  if (it == files.end()) {
    files.push_back({absolute, access, std::move(why)});
    g_generation.fetch_add(1, std::memory_order_release);
  } else if (access == KernelFileAccess::Hidden && it->access != KernelFileAccess::Hidden) {
    it->access = access;
    it->why = std::move(why);
    g_generation.fetch_add(1, std::memory_order_release);
  }
}

std::uint64_t kernel_files_generation() { return g_generation.load(std::memory_order_acquire); }

std::vector<KernelFile> kernel_files() {
  std::lock_guard lock(registry_mutex());
  return registry();
}

void register_tool_area(const std::filesystem::path& path, std::string why) {
  if (path.empty()) return;
  const std::filesystem::path absolute = normal_absolute(path);
  if (absolute.empty()) return;
  std::lock_guard lock(registry_mutex());
  auto& list = areas();
  if (std::any_of(list.begin(), list.end(), [&](const ToolArea& a) { return a.path == absolute; }))
    return;
  list.push_back({absolute, std::move(why)});
  g_generation.fetch_add(1, std::memory_order_release);
}

std::vector<ToolArea> tool_areas() {
  std::lock_guard lock(registry_mutex());
  return areas();
}

}  // namespace kernex
