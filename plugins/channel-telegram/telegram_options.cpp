#include "telegram_options.hpp"

#include "kernex/http/client.hpp"

namespace kernex::telegram {

namespace {

Result<std::int64_t> integer(const Json& value, const std::string& key, std::int64_t min,
                             std::int64_t max) {
  if (!value.is_number_integer() || value.get<std::int64_t>() < min ||
      value.get<std::int64_t>() > max)
    return fail(ErrorCode::Config, "telegram: option `" + key + "`: expected an integer from " +
                                       std::to_string(min) + " to " + std::to_string(max));
  return value.get<std::int64_t>();
}

Result<std::string> text(const Json& value, const std::string& key) {
  if (!value.is_string() || value.get<std::string>().empty())
    return fail(ErrorCode::Config, "telegram: option `" + key + "`: expected a non-empty string");
  return value.get<std::string>();
}

Result<void> set_option(Options& out, const std::string& key, const Json& value) {
  if (key == "base_url") {
    KERNEX_ASSIGN_OR_RETURN(out.base_url, text(value, key));
    if (auto url = http::Url::parse(out.base_url); !url)
      return fail(ErrorCode::Config, "telegram: option `base_url`: " + url.error().message);
  } else if (key == "token_env") {
    KERNEX_ASSIGN_OR_RETURN(out.token_env, text(value, key));
  } else if (key == "pairing_code") {
    KERNEX_ASSIGN_OR_RETURN(out.pairing_code, text(value, key));
  } else if (key == "pairing_attempts") {
    KERNEX_ASSIGN_OR_RETURN(auto n, integer(value, key, 1, 1000));
    out.pairing_attempts = static_cast<std::uint32_t>(n);
  } else if (key == "pairing_window_s") {
    KERNEX_ASSIGN_OR_RETURN(auto n, integer(value, key, 1, 7 * 86'400));
    out.pairing_window = std::chrono::seconds(n);
  } else if (key == "allowed_users") {
    if (!value.is_array())
      return fail(ErrorCode::Config, "telegram: option `allowed_users`: expected a list of ids");
    for (const auto& id : value) {
      KERNEX_ASSIGN_OR_RETURN(auto n, integer(id, "allowed_users", 1, INT64_MAX));
      out.allowed_users.insert(n);
    }
  } else if (key == "session_scope") {
    if (value == "chat")
      out.scope = SessionScope::Chat;
    else if (value == "user")
      out.scope = SessionScope::User;
    else
      return fail(ErrorCode::Config, "telegram: option `session_scope`: expected chat or user");
  } else if (key == "poll_timeout_s") {
    KERNEX_ASSIGN_OR_RETURN(auto n, integer(value, key, 0, 50));
    out.poll_timeout = std::chrono::seconds(n);
  } else if (key == "edit_interval_ms") {
    KERNEX_ASSIGN_OR_RETURN(auto n, integer(value, key, 1000, 60'000));
    out.edit_interval = std::chrono::milliseconds(n);
  } else if (key == "approval_timeout_s") {
    KERNEX_ASSIGN_OR_RETURN(auto n, integer(value, key, 1, 86'400));
    out.approval_timeout = std::chrono::seconds(n);
  } else {
    return fail(ErrorCode::Config,
                "telegram: unknown option `" + key +
                    "` (expected base_url, token_env, allowed_users, pairing_code, "
                    "pairing_attempts, pairing_window_s, session_scope, poll_timeout_s, "
                    "edit_interval_ms, approval_timeout_s)");
  }
  return {};
}

}  // namespace

Result<Options> parse_options(const Json& config) {
  Options out;
  if (config.is_null()) return out;
  if (!config.is_object()) return fail(ErrorCode::Config, "telegram: options: expected a mapping");
  for (const auto& [key, value] : config.items())
    KERNEX_RETURN_IF_ERROR(set_option(out, key, value));
  return out;
}

}  // namespace kernex::telegram
