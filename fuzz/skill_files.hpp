// A scratch skill folder per fuzz process, for the targets whose production entry point reads a
// folder (the spec lint, mcp.json, kernex.lock): each input is written into it, then judged.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace kernex::fuzz {

class ScratchSkill {
 public:
  // `tag` keeps targets apart when they share one process (the regression suite).
  explicit ScratchSkill(std::string_view tag)
      : root_(std::filesystem::temp_directory_path() /
              ("kx-fuzz-" + std::string(tag) + "-" + std::to_string(::getpid()))),
        folder_(root_ / "fuzz-skill") {
    std::filesystem::create_directories(folder_);
  }
  ~ScratchSkill() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  ScratchSkill(const ScratchSkill&) = delete;
  ScratchSkill& operator=(const ScratchSkill&) = delete;

  const std::filesystem::path& folder() const { return folder_; }

  void write(const std::string& name, std::string_view content) const {
    std::ofstream out(folder_ / name, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
  }

 private:
  std::filesystem::path root_;
  std::filesystem::path folder_;
};

}  // namespace kernex::fuzz
