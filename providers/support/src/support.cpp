#include "kernex/providers/support.hpp"

#include "kernex/number.hpp"
#include "kernex/log.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <set>

namespace kernex::providers {

namespace {

std::string trim_end(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

std::string trim_start(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  return std::string(s);
}

}  // namespace

SplitPrompt split_cache_boundary(std::string_view system_prompt) {
  const auto at = system_prompt.find(kCacheBoundary);
  if (at == std::string_view::npos) return {std::string(system_prompt), {}, false};
  return {trim_end(system_prompt.substr(0, at)),
          trim_start(system_prompt.substr(at + kCacheBoundary.size())), true};
}

std::string strip_cache_boundary(std::string_view system_prompt) {
  SplitPrompt split = split_cache_boundary(system_prompt);
  if (!split.found) return split.stable;
  if (split.stable.empty()) return split.dynamic;
  if (split.dynamic.empty()) return split.stable;
  return split.stable + "\n\n" + split.dynamic;
}

// ---- options ------------------------------------------------------------------------------

namespace {

using config::Field;
using config::FieldType;

constexpr std::array kCommonOptionFields{
    Field{"model", FieldType::String, "the model id", "the provider's"},
    Field{"base_url", FieldType::String,
          "the API's base URL: https://, or http:// for loopback (or allow_insecure_http)",
          "the provider's"},
    Field{"api_key", FieldType::String, "the API key (better: api_key_env)"},
    Field{"api_key_env", FieldType::String, "the environment variable holding the API key",
          "the provider's"},
    Field{"max_tokens", FieldType::Integer, "output tokens per model call", "the provider's", 1,
          kMaxTokensOption},
    Field{.name = "timeout_secs",
          .type = FieldType::Number,
          .doc = "total time of one request, retries included",
          .default_text = "120",
          .number_min = kMinTimeoutSecs,
          .number_max = kMaxTimeoutSecs,
          .unit = "s"},
    Field{.name = "connect_timeout_secs",
          .type = FieldType::Number,
          .doc = "time to connect (at most timeout_secs)",
          .default_text = "10",
          .number_min = kMinTimeoutSecs,
          .number_max = kMaxTimeoutSecs,
          .unit = "s"},
    Field{.name = "read_timeout_secs",
          .type = FieldType::Number,
          .doc = "longest silence while reading a reply",
          .default_text = "timeout_secs",
          .number_min = kMinTimeoutSecs,
          .number_max = kMaxTimeoutSecs,
          .unit = "s"},
    Field{"max_retries", FieldType::Integer, "retries of a failed request", "3", 0, kMaxRetries},
    Field{.name = "retry_base_ms",
          .type = FieldType::Integer,
          .doc = "first retry's backoff, doubled after each",
          .default_text = "1000",
          .max = kMaxRetryBaseMs,
          .unit = "ms"},
    Field{"allow_insecure_http", FieldType::Bool,
          "accept a plain http:// base_url on a non-loopback host (said aloud at start)", "false"},
};

}  // namespace

std::span<const config::Field> common_option_fields() { return kCommonOptionFields; }

OptionReader::OptionReader(std::string provider, const Json& config,
                           std::span<const config::Field> own)
    : provider_(std::move(provider)), config_(config) {
  fields_.assign(own.begin(), own.end());
  fields_.insert(fields_.end(), kCommonOptionFields.begin(), kCommonOptionFields.end());
}

config::Where OptionReader::where(std::string_view key) const {
  std::string path = provider_ + ": option `";
  path.append(key).append("`");
  return {"", 0, std::move(path)};
}

Result<const config::Field*> OptionReader::field(std::string_view key,
                                                 config::FieldType type) const {
  const config::Field* f = section().find(key);
  if (f == nullptr || f->type != type) {
    return fail(ErrorCode::Internal, provider_ + ": option `" + std::string(key) +
                                         "` is read as a type its field table does not give");
  }
  return f;
}

std::optional<config::FieldValue> OptionReader::value(std::string_view key) const {
  if (!config_.is_object()) return std::nullopt;
  const auto it = config_.find(key);
  if (it == config_.end()) return std::nullopt;
  return config::FieldValue::of(*it);
}

Result<std::optional<std::string>> OptionReader::string(std::string_view key) const {
  KERNEX_RETURN_IF_ERROR(field(key, config::FieldType::String));
  const auto v = value(key);
  if (!v) return std::nullopt;
  return config::read_string(*v, where(key));
}

Result<std::optional<std::uint64_t>> OptionReader::uint(std::string_view key) const {
  KERNEX_ASSIGN_OR_RETURN(const config::Field* f, field(key, config::FieldType::Integer));
  const auto v = value(key);
  if (!v) return std::nullopt;
  return config::read_integer(*f, *v, where(key));
}

Result<std::optional<double>> OptionReader::number(std::string_view key) const {
  KERNEX_ASSIGN_OR_RETURN(const config::Field* f, field(key, config::FieldType::Number));
  const auto v = value(key);
  if (!v) return std::nullopt;
  return config::read_number(*f, *v, where(key));
}

Result<std::optional<bool>> OptionReader::boolean(std::string_view key) const {
  KERNEX_RETURN_IF_ERROR(field(key, config::FieldType::Bool));
  const auto v = value(key);
  if (!v) return std::nullopt;
  return config::read_bool(*v, where(key));
}

Result<void> OptionReader::check_keys() const {
  if (config_.is_null()) return {};
  if (!config_.is_object()) {
    return config::field_error({"", 0, provider_ + ": options"},
                               "expected a mapping of options (a JSON object), got " +
                                   config::FieldValue::of(config_).got);
  }
  for (const auto& [key, value] : config_.items())
    KERNEX_RETURN_IF_ERROR(config::known_key(section(), key, where(key)));
  return {};
}

namespace {

// Once per provider and URL per process: a provider is created for every run.
void warn_insecure_once(const std::string& provider, const std::string& url) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard lock(mutex);
  if (!warned.insert(provider + ' ' + url).second) return;
  log(LogLevel::Warn, provider + ": allow_insecure_http: requests to " + url +
                          " travel over plain http (prompts, answers and any API key readable "
                          "on the network)");
}

}  // namespace

Result<CommonOptions> read_common(OptionReader& reader, const ProviderDefaults& defaults) {
  CommonOptions o;
  o.name = defaults.name;
  KERNEX_RETURN_IF_ERROR(reader.check_keys());
#define KX_READ(var, call) \
  auto var = call;         \
  if (!var) return std::unexpected(var.error())
  KX_READ(model, reader.string("model"));
  KX_READ(base_url, reader.string("base_url"));
  KX_READ(api_key, reader.string("api_key"));
  KX_READ(api_key_env, reader.string("api_key_env"));
  KX_READ(max_tokens, reader.uint("max_tokens"));
  KX_READ(timeout, reader.number("timeout_secs"));
  KX_READ(connect_timeout, reader.number("connect_timeout_secs"));
  KX_READ(read_timeout, reader.number("read_timeout_secs"));
  KX_READ(max_retries, reader.uint("max_retries"));
  KX_READ(retry_base_ms, reader.uint("retry_base_ms"));
  KX_READ(allow_insecure_http, reader.boolean("allow_insecure_http"));
#undef KX_READ

  o.model = model->value_or(defaults.model);
  if (o.model.empty()) return config::field_error(reader.where("model"), "must not be empty");
  o.base_url = base_url->value_or(defaults.base_url);
  while (o.base_url.ends_with('/')) o.base_url.pop_back();
  auto url = http::Url::parse(o.base_url);
  if (!url) return config::field_error(reader.where("base_url"), url.error().message);
  o.url = *url;
  o.max_tokens = *max_tokens;

  const bool keyed = !defaults.key_env.empty();
  o.api_key_env = api_key_env->value_or(defaults.key_env);
  if (*api_key) {
    o.api_key = **api_key;
  } else if (!o.api_key_env.empty()) {
    if (const char* v = std::getenv(o.api_key_env.c_str()); v != nullptr) o.api_key = v;
  }
  register_secret(o.api_key);  // so every sink of the process redacts it, not only our errors
  const bool insecure = o.url.scheme != "https" && !o.url.is_loopback();
  // A self-hosted server on a private network (vLLM in a compose network) speaks plain http:
  // allowed once the operator says so, and said aloud, since the key and prompts travel readable.
  const bool insecure_allowed = insecure && allow_insecure_http->value_or(false);
  if (keyed && insecure && !insecure_allowed) {
    return fail(ErrorCode::Config,
                o.name +
                    ": base_url must use https:// (plain http:// is accepted for loopback hosts, "
                    "or for any host with the provider option allow_insecure_http: true), got "
                    "host " +
                    o.url.host);
  }
  if (insecure_allowed) warn_insecure_once(o.name, o.base_url);
  if (keyed && o.api_key.empty() && !o.url.is_loopback() && !insecure_allowed) {
    return fail(ErrorCode::Config, o.name + ": no API key: set the environment variable " +
                                       (o.api_key_env.empty() ? defaults.key_env : o.api_key_env) +
                                       " or the option api_key (or api_key_env=NAME)");
  }

  o.client.total_timeout = seconds_to_ms(timeout->value_or(120.0));
  o.client.read_timeout =
      read_timeout->has_value() ? seconds_to_ms(**read_timeout) : o.client.total_timeout;
  o.client.connect_timeout = std::min(
      o.client.total_timeout, connect_timeout->has_value() ? seconds_to_ms(**connect_timeout)
                                                           : std::chrono::milliseconds(10'000));
  o.client.max_retries = static_cast<int>(max_retries->value_or(3));
  o.client.backoff_base = std::chrono::milliseconds(retry_base_ms->value_or(1000));
  return o;
}

std::string join_url(std::string_view base, std::string_view path) {
  std::string out(base);
  while (out.ends_with('/')) out.pop_back();
  if (!path.starts_with('/')) out += '/';
  out += path;
  return out;
}

bool path_ends_with(const http::Url& url, std::string_view suffix) {
  std::string_view path = url.target;
  if (const auto q = path.find('?'); q != std::string_view::npos) path = path.substr(0, q);
  while (path.size() > 1 && path.ends_with('/')) path.remove_suffix(1);
  return path.ends_with(suffix);
}

std::string excerpt(std::string_view body, std::size_t cap) {
  std::string out;
  const std::size_t n = std::min(cap, body.size());
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(body[i]);
    if (c == '\n' || c == '\r' || c == '\t') {
      out += ' ';
    } else if (c < 0x20 || c == 0x7f) {
      out += '?';
    } else {
      out += static_cast<char>(c);
    }
  }
  if (body.size() > cap) out += " [... " + std::to_string(body.size() - cap) + " bytes truncated]";
  return out;
}

std::string error_detail(std::string_view body) {
  Json j = parse_untrusted(body);
  if (j.is_discarded()) {
    const std::string head(body.substr(0, 512));
    std::string lowered = head;
    for (auto& c : lowered) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lowered.find("<html") != std::string::npos ||
        lowered.find("<!doctype") != std::string::npos) {
      return "the server answered with an HTML page, not the provider's JSON";
    }
    return {};
  }
  auto str = [](const Json& v) -> std::string {
    return v.is_string() ? v.get<std::string>() : std::string();
  };
  if (j.is_array() && !j.empty()) j = j.front();  // Gemini streams wrap errors in an array
  if (!j.is_object()) return {};
  if (j.contains("error")) {
    const Json& e = j.at("error");
    if (e.is_string()) return e.get<std::string>();
    if (e.is_object()) {
      std::string msg = str(e.value("message", Json()));
      const std::string type = str(e.value("type", Json()));
      const std::string status = str(e.value("status", Json()));
      const std::string prefix = !type.empty() ? type : status;
      if (!prefix.empty()) msg = msg.empty() ? prefix : prefix + ": " + msg;
      return msg;
    }
  }
  return str(j.value("message", Json()));
}

Error http_error(const CommonOptions& options, const http::Response& response) {
  std::string msg = options.name + ": HTTP " + std::to_string(response.status) + " from " +
                    options.url.authority();
  // Redacted before the excerpt cuts it and again after: a key split by the cut is caught by
  // redact()'s pieces, and the final pass covers what error_detail() decoded from JSON escapes.
  const std::string body = redact(response.body, options.api_key);
  const std::string detail = error_detail(body);
  if (!detail.empty()) msg += ": " + excerpt(detail, 1024);
  if (!body.empty()) msg += " (body: " + excerpt(body) + ")";
  return Error(ErrorCode::Provider, redact(std::move(msg), options.api_key));
}

Error transport_error(const CommonOptions& options, const Error& error) {
  return Error(error.code, redact(options.name + ": " + error.message, options.api_key));
}

Error stream_error(const CommonOptions& options, std::string_view data) {
  std::string detail = error_detail(data);
  if (detail.empty()) detail = excerpt(data, 1024);
  return Error(ErrorCode::Provider,
               redact(options.name + ": stream error from " + options.url.authority() + ": " +
                          excerpt(detail, 1024),
                      options.api_key));
}

Result<Json> parse_body(const CommonOptions& options, std::string_view body) {
  Json j = parse_untrusted(body);
  if (j.is_discarded() || !j.is_object()) {
    return fail(ErrorCode::Provider,
                redact(options.name + ": the response from " + options.url.authority() +
                           " is not a JSON object (body: " + excerpt(body) + ")",
                       options.api_key));
  }
  return j;
}

// ---- events -------------------------------------------------------------------------------

void Emitter::text(std::string_view t) const {
  if (sink_ && !t.empty())
    sink_(StreamEvent{StreamEvent::Kind::TextDelta, std::string(t), {}, {}, {}, {}});
}
void Emitter::thinking(std::string_view t) const {
  if (sink_ && !t.empty())
    sink_(StreamEvent{StreamEvent::Kind::ThinkingDelta, std::string(t), {}, {}, {}, {}});
}
void Emitter::tool_start(const std::string& id, const std::string& name) const {
  if (sink_) sink_(StreamEvent{StreamEvent::Kind::ToolCallStart, {}, id, name, {}, {}});
}
void Emitter::tool_delta(const std::string& id, std::string_view fragment) const {
  if (sink_ && !fragment.empty()) {
    sink_(StreamEvent{StreamEvent::Kind::ToolCallDelta, std::string(fragment), id, {}, {}, {}});
  }
}
void Emitter::tool_end(const std::string& id) const {
  if (sink_) sink_(StreamEvent{StreamEvent::Kind::ToolCallEnd, {}, id, {}, {}, {}});
}
void Emitter::usage(const Usage& usage, const std::string& stop_reason) const {
  if (sink_) sink_(StreamEvent{StreamEvent::Kind::Usage, {}, {}, {}, usage, stop_reason});
}
void Emitter::done() const {
  if (sink_) sink_(StreamEvent{StreamEvent::Kind::Done, {}, {}, {}, {}, {}});
}
void Emitter::error(const std::string& message) const {
  if (sink_) sink_(StreamEvent{StreamEvent::Kind::Error, message, {}, {}, {}, {}});
}

std::uint64_t u64(const Json& j, const char* key) {
  if (!j.is_object()) return 0;
  auto it = j.find(key);
  if (it == j.end()) return 0;
  if (it->is_number_unsigned()) return it->get<std::uint64_t>();
  if (it->is_number_integer() && it->get<std::int64_t>() > 0)
    return static_cast<std::uint64_t>(it->get<std::int64_t>());
  return 0;
}

std::string str(const Json& j, const char* key) {
  if (!j.is_object()) return {};
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

Json member(const Json& j, const char* key, Json fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (!fallback.is_null() && it->type() != fallback.type()) return fallback;
  return *it;
}

bool flag(const Json& j, const char* key) {
  if (!j.is_object()) return false;
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

Json parse_arguments(std::string_view text) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return Json::object();
  Json j = parse_untrusted(text);
  if (j.is_discarded() || !j.is_object()) return Json(std::string(text));
  return j;
}

http::Headers json_headers() {
  return {{"Content-Type", "application/json"}, {"Accept", "application/json"}};
}

}  // namespace kernex::providers

namespace kernex::providers {

ToolChoice call_tool_choice(const Context& context, const std::vector<ToolSpec>& tools) {
  const ToolChoice& asked = context.generation.tool_choice;
  if (tools.empty() || asked.mode == ToolChoice::Mode::Auto) return {};
  if (asked.mode == ToolChoice::Mode::None) return {};
  const bool first_call = std::none_of(context.turn.begin(), context.turn.end(),
                                       [](const ContextEntry& e) { return e.role == "assistant"; });
  if (!first_call) return {};
  if (asked.mode == ToolChoice::Mode::Named &&
      std::none_of(tools.begin(), tools.end(),
                   [&](const ToolSpec& t) { return t.name == asked.name; }))
    return {};
  return asked;
}

}  // namespace kernex::providers
