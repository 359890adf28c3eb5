#include "kernex/kernel_files.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>

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

std::atomic<std::uint64_t> g_generation{0};

}  // namespace

void register_kernel_file(const std::filesystem::path& path, KernelFileAccess access, std::string why) {
  if (path.empty()) return;
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  if (ec) return;
  absolute = absolute.lexically_normal();
  if (absolute.has_relative_path() && absolute.filename().empty()) absolute = absolute.parent_path();  // "dir/"
  std::lock_guard lock(registry_mutex());
  auto& files = registry();
  auto it = std::find_if(files.begin(), files.end(), [&](const KernelFile& f) { return f.path == absolute; });
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

}  // namespace kernex
