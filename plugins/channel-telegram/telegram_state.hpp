// The channel's durable state in the host's state_dir (state.json, replaced atomically): the
// next update offset, users paired by code, each chat's session generation (/new), and the
// strangers' failed pairing attempts per chat (so a restart does not reset their limit). The file
// is ours, but read as untrusted: every field is checked, and a bad one is a Parse error.
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
  // A stranger's message in `chat` that was not the pairing code, at `now_s` (unix seconds):
  // Refuse (answer the usual refusal), LockedNow (the limit was just reached: say so once) or
  // Silent (locked: answer nothing). A chat's window opens at its first failure.
  enum class Gate { Refuse, LockedNow, Silent };
  Result<Gate> pairing_failed(std::int64_t chat, std::int64_t now_s, std::uint32_t max_attempts,
                              std::int64_t window_s);
  bool pairing_locked(std::int64_t chat, std::int64_t now_s, std::uint32_t max_attempts,
                      std::int64_t window_s) const;
  // Pairs `user`, forgetting the failures of `chat`.
  Result<void> pair(std::int64_t user, std::int64_t chat);
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
  struct Failures {
    std::uint32_t count = 0;
    std::int64_t since = 0;  // unix seconds of the window's first failure
  };
  std::map<std::int64_t, Failures> failures_;
};

}  // namespace kernex::telegram
