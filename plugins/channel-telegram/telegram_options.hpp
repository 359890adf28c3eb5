// The channel's options (kernex.yaml `channels: [{name: telegram, options: {...}}]`), checked
// strictly: an unknown or mistyped option is a Config error naming it.
#pragma once

#include <chrono>
#include <cstdint>
#include <set>
#include <string>

#include "kernex/error.hpp"
#include "kernex/json.hpp"

namespace kernex::telegram {

enum class SessionScope { Chat, User };  // User: one session per person in group chats

struct Options {
  std::string base_url = "https://api.telegram.org";
  std::string token_env = "TELEGRAM_BOT_TOKEN";
  std::set<std::int64_t> allowed_users;
  std::string pairing_code;  // empty: no pairing
  // A chat that sent this many messages other than the code within the window (a stranger's)
  // is refused, told so once, until the window ends; the code too.
  std::uint32_t pairing_attempts = 5;
  std::chrono::seconds pairing_window{900};
  SessionScope scope = SessionScope::Chat;
  std::chrono::seconds poll_timeout{30};
  std::chrono::milliseconds edit_interval{1000};  // per chat, between message sends and edits
  std::chrono::seconds approval_timeout{300};     // unanswered: denied
};

Result<Options> parse_options(const Json& config);

}  // namespace kernex::telegram
