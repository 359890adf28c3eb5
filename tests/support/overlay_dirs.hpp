// What the overlay-mode tests share: a throwaway real tree with its overlay layers beside it (out
// of every grant's reach), whether this kernel can mount it, and a snapshot of a tree that shows it
// unchanged byte for byte.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>

#include "kernex/files.hpp"
#include "kernex/sandbox/policy.hpp"

namespace kernex::testing {

// A file's whole content, empty when there is none.
inline std::string file_text(const std::filesystem::path& p) {
  return read_regular_file(p, "test file", 64u << 20).value_or("");
}

// Every entry below `root` with its type, mode and content (symlinks by target).
inline std::map<std::string, std::string> tree_snapshot(const std::filesystem::path& root) {
  namespace fs = std::filesystem;
  std::map<std::string, std::string> out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    struct stat st {};
    ::lstat(it->path().c_str(), &st);
    std::string v = std::to_string(st.st_mode) + ":";
    if (S_ISLNK(st.st_mode)) v += fs::read_symlink(it->path()).string();
    if (S_ISREG(st.st_mode)) v += file_text(it->path());
    out[fs::relative(it->path(), root).string()] = v;
  }
  return out;
}

// A throwaway root (canonical, as the policies compare real paths) holding `ws/`, the real tree,
// and `layers/` with `upper/` and `work/` made 0700 as a host makes them.
class OverlayDirs {
 public:
  OverlayDirs() {
    namespace fs = std::filesystem;
    std::string tmpl = (fs::temp_directory_path() / "kernex-overlay-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    root_ = fs::canonical(tmpl);
    fs::create_directories(ws());
    for (const auto& dir : {layers(), upper(), layers() / "work"}) {
      if (::mkdir(dir.c_str(), 0700) != 0) throw std::runtime_error("mkdir " + dir.string());
    }
  }
  ~OverlayDirs() {
    std::error_code ec;
    // overlayfs leaves work/work mode 000: made removable first.
    std::filesystem::permissions(layers() / "work" / "work", std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(root_, ec);
  }
  OverlayDirs(const OverlayDirs&) = delete;
  OverlayDirs& operator=(const OverlayDirs&) = delete;

  // Why this kernel can't mount the overlay (for GTEST_SKIP), or empty when it can.
  std::string overlay_unavailable() const {
    auto probe = sandbox::PolicyBuilder()
                     .workspace(ws())
                     .workspace_overlay(sandbox::WorkspaceOverlay::in(layers()))
                     .Build();
    return probe ? std::string() : "overlay not available here: " + probe.error().describe();
  }

  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path ws() const { return root_ / "ws"; }
  std::filesystem::path layers() const { return root_ / "layers"; }
  std::filesystem::path upper() const { return layers() / "upper"; }

 private:
  std::filesystem::path root_;
};

}  // namespace kernex::testing
