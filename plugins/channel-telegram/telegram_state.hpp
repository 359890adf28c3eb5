// The channel's durable state in the host's state_dir (state.json, replaced atomically): the
// next update offset, users paired by code, and each chat's session generation (/new).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "kernex/error.hpp"

namespace kernex::telegram {

class TelegramState {
 public:
  static Result<TelegramState> load(const std::filesystem::path& dir);
  TelegramState(TelegramState&& other) noexcept;

  std::int64_t offset() const;
  // Stored (fsync'd) before it returns: updates below `offset` are never handled again.
  Result<void> set_offset(std::int64_t offset);
  bool paired(std::int64_t user) const;
  Result<void> pair(std::int64_t user);
  std::uint64_t generation(const std::string& scope) const;
  Result<std::uint64_t> next_generation(const std::string& scope);

 private:
  explicit TelegramState(std::filesystem::path file) : file_(std::move(file)) {}
  Result<void> save_locked();

  std::filesystem::path file_;
  mutable std::mutex mutex_;
  std::int64_t offset_ = 0;
  std::set<std::int64_t> paired_;
  std::map<std::string, std::uint64_t> generations_;
};

}  // namespace kernex::telegram
