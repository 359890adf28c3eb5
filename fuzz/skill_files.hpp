// Shared by the skill targets: a scratch skill folder per fuzz process, for the entry points that
// read a folder (the spec lint, mcp.json, kernex.lock), each input written into it, then judged;
// and the serialisation every loaded skill or failure must survive.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <fstream>
#include <string>
#include <string_view>

#include "kernex/skills/loader.hpp"

namespace kernex::fuzz {

class ScratchSkill {
 public:
  // `tag` keeps targets apart when they share one process (the regression suite).
  // mkdtemp, not a name from the pid: a predictable path in /tmp could be planted beforehand.
  explicit ScratchSkill(std::string_view tag) {
    std::string pattern =
        (std::filesystem::temp_directory_path() / ("kx-fuzz-" + std::string(tag) + "-XXXXXX"))
            .string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    root_ = pattern;
    folder_ = root_ / "fuzz-skill";
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

// What loads must serialise (the CLI's --json, trajectories); a failure's text may hold any bytes
// of the input, so its JSON replaces invalid UTF-8.
inline void serialise(const std::expected<skills::Skill, skills::SkillFailure>& skill) {
  if (skill)
    (void)skills::to_json(*skill).dump();
  else
    (void)skills::to_json(skill.error()).dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace kernex::fuzz
