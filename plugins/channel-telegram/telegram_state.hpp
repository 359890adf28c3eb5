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
#include <vector>

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

  // Approvals asked in a chat and not decided: kept across a stop or crash, so the next process
  // tells the chat its turn stopped and answers a press of their buttons, instead of dropping
  // them in silence.
  struct AskedApproval {
    std::string id;
    std::int64_t chat = 0;
    std::string tool;
  };
  Result<void> approval_asked(const AskedApproval& asked);
  Result<void> approval_settled(const std::string& id);
  // Those an earlier process left (read at load); clear_interrupted drops them from the file,
  // and this process still knows their ids.
  std::vector<AskedApproval> interrupted() const;
  bool was_interrupted(const std::string& id) const;
  Result<void> clear_interrupted();
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
  std::map<std::string, AskedApproval> approvals_;
  std::map<std::string, AskedApproval> interrupted_;
};

}  // namespace kernex::telegram
