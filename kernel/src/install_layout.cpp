#include "install_layout.hpp"

#include <dlfcn.h>

#include <system_error>

namespace kernex::detail {

namespace fs = std::filesystem;

namespace {

fs::path find_library_dir() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<const void*>(&library_dir), &info) == 0 ||
      info.dli_fname == nullptr)
    return {};
  std::error_code ec;
  fs::path file = fs::canonical(info.dli_fname, ec);
  return ec ? fs::path() : file.parent_path();
}

bool same_dir(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec) && !ec;
}

}  // namespace

const fs::path& library_dir() {
  static const fs::path dir = find_library_dir();
  return dir;
}

fs::path bundled_plugin_dir() {
  if (library_dir().empty()) return fs::path(KERNEX_INSTALL_LIBDIR) / KERNEX_PLUGIN_DIR_FROM_LIB;
  return library_dir() / KERNEX_PLUGIN_DIR_FROM_LIB;
}

fs::path bundled_data_dir() {
  if (library_dir().empty()) return fs::path(KERNEX_INSTALL_LIBDIR) / KERNEX_DATA_DIR_FROM_LIB;
  // Comparing directories, not strings: only the build tree's own library reads the sources.
  if (same_dir(library_dir(), KERNEX_BUILD_LIBDIR)) return KERNEX_DATA_BUILD_DIR;
  return (library_dir() / KERNEX_DATA_DIR_FROM_LIB).lexically_normal();
}

}  // namespace kernex::detail
