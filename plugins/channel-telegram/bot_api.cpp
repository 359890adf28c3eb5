#include "bot_api.hpp"

#include <algorithm>

#include <condition_variable>
#include <mutex>

namespace kernex::telegram {

namespace {

constexpr int kMaxRateLimitWaits = 10;
constexpr std::int64_t kMaxRetryAfterSeconds = 3600;

// retry_after of a 429 reply, when it carries one that makes sense.
std::optional<std::int64_t> retry_after(const Json& reply) {
  if (!reply.is_object()) return std::nullopt;
  auto params = reply.find("parameters");
  if (params == reply.end() || !params->is_object()) return std::nullopt;
  auto value = params->find("retry_after");
  if (value == params->end() || !value->is_number_integer()) return std::nullopt;
  const auto seconds = value->get<std::int64_t>();
  // A negative or huge value is not a reason to hammer the API: wait the cap.
  return std::clamp<std::int64_t>(seconds, 1, kMaxRetryAfterSeconds);
}

std::string description(const Json& reply) {
  if (reply.is_object()) {
    auto d = reply.find("description");
    if (d != reply.end() && d->is_string()) return d->get<std::string>().substr(0, 300);
  }
  return "no description";
}

}  // namespace

bool wait_for(std::chrono::milliseconds duration, std::stop_token stop) {
  std::mutex mutex;
  std::condition_variable_any wake;
  std::unique_lock lock(mutex);
  return !wake.wait_for(lock, stop, duration, [] { return false; }) && !stop.stop_requested();
}

BotApi::BotApi(std::string base_url, std::string token, std::chrono::milliseconds read_timeout)
    : base_url_(std::move(base_url)), token_(std::move(token)) {
  while (!base_url_.empty() && base_url_.back() == '/') base_url_.pop_back();
  http::ClientOptions options;
  options.max_retries = 0;  // 429s are waited out here, by the Bot API's own retry_after
  options.read_timeout = read_timeout;
  options.total_timeout = read_timeout + std::chrono::seconds(30);
  options.max_response_bytes = 24u << 20;  // the Bot API serves files up to 20 MB
  options.user_agent = "kernex-telegram/0.1";
  client_ = std::make_unique<http::Client>(options);
}

std::string BotApi::redact(std::string text) const {
  if (token_.empty()) return text;
  for (auto at = text.find(token_); at != std::string::npos; at = text.find(token_, at))
    text.replace(at, token_.size(), "<token>");
  return text;
}

Result<Json> BotApi::call(const std::string& method, const Json& params, std::stop_token stop) {
  http::Request request;
  request.url = base_url_ + "/bot" + token_ + "/" + method;
  request.headers = {{"Content-Type", "application/json"}};
  request.body = params.dump(-1, ' ', false, Json::error_handler_t::replace);
  request.stop = stop;
  for (int attempt = 0;; ++attempt) {
    ++stats_.calls;
    auto response = client_->send(request);
    if (!response)
      return fail(response.error().code,
                  "telegram " + method + ": " + redact(response.error().message));
    // parse_untrusted: `return *result` copies, and copying recurses as deep as the reply nests.
    Json reply = parse_untrusted(response->body);
    if (reply.is_discarded() || !reply.is_object())
      return fail(ErrorCode::Provider, "telegram " + method + ": expected a JSON object, got " +
                                           std::to_string(response->body.size()) +
                                           " bytes of something else (HTTP " +
                                           std::to_string(response->status) + ")");
    if (response->status == 429 && attempt < kMaxRateLimitWaits) {
      ++stats_.rate_limited;
      const std::int64_t seconds = retry_after(reply).value_or(1);
      if (!wait_for(std::chrono::seconds(seconds) + std::chrono::milliseconds(50), stop))
        return fail(ErrorCode::Cancelled, "telegram " + method + ": stopped");
      continue;
    }
    auto ok = reply.find("ok");
    if (response->status != 200 || ok == reply.end() || !ok->is_boolean() || !ok->get<bool>())
      return fail(ErrorCode::Provider, "telegram " + method + ": HTTP " +
                                           std::to_string(response->status) + ": " +
                                           description(reply));
    auto result = reply.find("result");
    if (result == reply.end())
      return fail(ErrorCode::Provider, "telegram " + method + ": the reply has no `result`");
    return *result;
  }
}

Result<std::string> BotApi::download(const std::string& file_path, std::stop_token stop) {
  http::Request request;
  request.method = "GET";
  request.url = base_url_ + "/file/bot" + token_ + "/" + file_path;
  request.stop = stop;
  auto response = client_->send(request);
  if (!response)
    return fail(response.error().code, "telegram file: " + redact(response.error().message));
  if (response->status != 200)
    return fail(ErrorCode::Provider, "telegram file: HTTP " + std::to_string(response->status));
  return std::move(response->body);
}

}  // namespace kernex::telegram
