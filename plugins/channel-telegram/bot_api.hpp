// The Bot API calls the channel makes, over kernex::http. Replies are untrusted: anything but
// {"ok": true, "result": ...} is a typed error naming the method. A 429 is waited out for its
// `parameters.retry_after` and the call made again, never sooner.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>

#include "kernex/error.hpp"
#include "kernex/http/client.hpp"
#include "kernex/json.hpp"

namespace kernex::telegram {

struct BotApiStats {
  std::uint64_t calls = 0;
  std::uint64_t rate_limited = 0;  // 429 answers waited out
};

class BotApi {
 public:
  // `read_timeout` must exceed the long poll's timeout.
  BotApi(std::string base_url, std::string token, std::chrono::milliseconds read_timeout);

  // POSTs `params` as JSON to <base_url>/bot<token>/<method>; the reply's `result`.
  Result<Json> call(const std::string& method, const Json& params, std::stop_token stop);
  // GETs <base_url>/file/bot<token>/<file_path> (a getFile result's file_path).
  Result<std::string> download(const std::string& file_path, std::stop_token stop);

  BotApiStats stats() const { return stats_; }

 private:
  std::string redact(std::string text) const;

  std::string base_url_;
  std::string token_;
  std::unique_ptr<http::Client> client_;
  BotApiStats stats_;
};

// Waits `duration` unless `stop` fires first; false when stopped.
bool wait_for(std::chrono::milliseconds duration, std::stop_token stop);

}  // namespace kernex::telegram
