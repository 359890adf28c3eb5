// What every network provider plugin shares: options, keys, base-URL policy, error reports
// and stream-event helpers. Linked statically into each plugin with kernex_http.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/config_fields.hpp"
#include "kernex/context.hpp"
#include "kernex/http/client.hpp"
#include "kernex/json.hpp"
#include "kernex/message.hpp"
#include "kernex/redact.hpp"

namespace kernex::providers {

// Callers put this in the system prompt where the stable (cacheable) part ends. Anthropic turns
// it into a cache_control block boundary; every other provider drops it.
inline constexpr std::string_view kCacheBoundary = "KERNEX_CACHE_BOUNDARY";

// Splits at the first marker: (stable with trailing space trimmed, dynamic with leading space
// trimmed). No marker: (whole prompt, "") and `found` false.
struct SplitPrompt {
  std::string stable;
  std::string dynamic;
  bool found = false;
};
SplitPrompt split_cache_boundary(std::string_view system_prompt);
// The prompt with the marker removed (stable + "\n\n" + dynamic).
std::string strip_cache_boundary(std::string_view system_prompt);

struct ProviderDefaults {
  std::string name;  // "openai", used in every message
  std::string model;
  std::string base_url;
  std::string key_env;  // empty: the provider takes no key
};

// Options every network provider accepts (kCommonOptionFields in support.cpp):
//   model, base_url, api_key, api_key_env, max_tokens, timeout_secs (total, default 120),
//   connect_timeout_secs, read_timeout_secs, max_retries (3), retry_base_ms (1000),
//   allow_insecure_http.
// Their ranges (README "Providers"); a value outside is a Config error naming the option:
inline constexpr std::uint64_t kMaxTokensOption = 4'294'967'295;  // [1, 2^32-1]
inline constexpr double kMinTimeoutSecs = 0.001;                  // every *_secs: [0.001, 86400]
inline constexpr double kMaxTimeoutSecs = 86'400;
inline constexpr std::uint64_t kMaxRetries = 10;           // [0, 10]
inline constexpr std::uint64_t kMaxRetryBaseMs = 600'000;  // [0, 600000]
struct CommonOptions {
  std::string name;
  std::string model;
  std::string base_url;
  http::Url url;        // base_url parsed
  std::string api_key;  // may be empty (loopback servers, keyless providers)
  std::string api_key_env;
  std::optional<std::uint64_t> max_tokens;
  http::ClientOptions client;
};

// The common options as a field table (name, type, range, default, doc).
std::span<const config::Field> common_option_fields();

// A provider's options (its plugin config, a JSON object) read through the one typed config
// reader (kernex/config_fields.hpp): its fields are the provider's own (`own`) and the common
// ones, each read with its field's type and range. Errors are Config errors worded
// "<provider>: option `key`: expected X, got Y"; an unknown key lists the known ones and
// suggests the nearest. Options come from kernex.yaml's provider sections or --provider-opt,
// merged, so no file or line is known here.
class OptionReader {
 public:
  OptionReader(std::string provider, const Json& config, std::span<const config::Field> own = {});
  Result<std::optional<std::string>> string(std::string_view key) const;
  Result<std::optional<std::uint64_t>> uint(std::string_view key) const;
  Result<std::optional<double>> number(std::string_view key) const;
  Result<std::optional<bool>> boolean(std::string_view key) const;
  // The options are a JSON object (or null) and every key is a field, else a Config error.
  Result<void> check_keys() const;
  config::Where where(std::string_view key) const;  // "<provider>: option `key`"

 private:
  config::Section section() const { return {"", fields_}; }
  // The field `key` names, which must be of `type` (a provider's code reading a key its table
  // lacks is a bug, reported as Internal); and its value, unset when absent.
  Result<const config::Field*> field(std::string_view key, config::FieldType type) const;
  std::optional<config::FieldValue> value(std::string_view key) const;

  std::string provider_;
  const Json& config_;
  std::vector<config::Field> fields_;
};

// Reads the common options (after any provider-specific ones were read from `reader`), picks
// the key from api_key or the api_key_env variable, and applies the URL policy: a keyed
// provider needs https:// unless the host is loopback, and a key unless the host is loopback.
Result<CommonOptions> read_common(OptionReader& reader, const ProviderDefaults& defaults);

// Joins a base URL and a path without doubling '/'.
std::string join_url(std::string_view base, std::string_view path);
// Whether a URL's path already ends with `suffix` (e.g. "/v1").
bool path_ends_with(const http::Url& url, std::string_view suffix);

// The first `cap` bytes with control characters escaped, plus " [... N bytes truncated]".
std::string excerpt(std::string_view body, std::size_t cap = 2048);

// "<name>: HTTP <status> from <host>: <provider message> (body: <excerpt>)", key redacted.
// The message is error.message / error / message from a JSON body, or notes an HTML page.
Error http_error(const CommonOptions& options, const http::Response& response);
// The provider's own error text in a body (error.message, error, message), or a note that
// the body is an HTML page; "" when there is none.
std::string error_detail(std::string_view body);
// An error reported inside a stream ("<name>: stream error from <host>: <detail>").
Error stream_error(const CommonOptions& options, std::string_view data);
// A transport failure, key redacted, as "<name>: <what>".
Error transport_error(const CommonOptions& options, const Error& error);
// Parses a response body; malformed JSON is an error with an excerpt.
Result<Json> parse_body(const CommonOptions& options, std::string_view body);

// Stream events, each a no-op without a sink.
class Emitter {
 public:
  explicit Emitter(const StreamSink& sink) : sink_(sink) {}
  bool active() const { return static_cast<bool>(sink_); }
  void text(std::string_view t) const;
  void thinking(std::string_view t) const;
  void tool_start(const std::string& id, const std::string& name) const;
  void tool_delta(const std::string& id, std::string_view fragment) const;
  void tool_end(const std::string& id) const;
  void usage(const Usage& usage, const std::string& stop_reason) const;
  void done() const;
  void error(const std::string& message) const;

 private:
  const StreamSink& sink_;
};

// A field of a provider's JSON reply, read leniently: 0 (or "") when `j` is not an object or the
// key is missing, null or of another type; a negative count is 0.
std::uint64_t u64(const Json& j, const char* key);
std::string str(const Json& j, const char* key);
// The member `key` of `j` when `j` is an object holding it with the kind of `fallback` (an
// object, an array, or anything when `fallback` is null); `fallback` otherwise. Unlike
// Json::value it never throws, whatever a server sent.
Json member(const Json& j, const char* key, Json fallback);
// True only for a member that is the boolean true.
bool flag(const Json& j, const char* key);

// Tool-call arguments from a model: a JSON object text. "" is {}; anything that is not a JSON
// object is kept as the raw string so the tool can report what it got.
Json parse_arguments(std::string_view text);

// Headers for a JSON POST.
http::Headers json_headers();

}  // namespace kernex::providers

namespace kernex::providers {

// The tool choice to send on this call: a forcing one (required, a named tool) holds for the
// turn's first model call only, as OpenAI's does for one response; later calls of the loop (after
// the run's own tools answered) are auto, so the model can finish. Auto also when no tools, and
// for none: the loop then offers none of the client's tools, and the run's own stay callable.
ToolChoice call_tool_choice(const Context& context, const std::vector<ToolSpec>& tools);

}  // namespace kernex::providers
