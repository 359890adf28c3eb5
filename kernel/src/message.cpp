#include "kernex/message.hpp"

#include <array>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>

namespace kernex {

namespace jf = json_fields;

namespace {

std::string random_uuid_v4() {
  // One generator per thread, seeded from the OS: ids need uniqueness, not secrecy.
  thread_local std::mt19937_64 rng = [] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd(), rd(), rd(), rd(), rd()};
    return std::mt19937_64(seq);
  }();
  std::array<unsigned char, 16> bytes{};
  for (std::size_t i = 0; i < bytes.size(); i += 8) {
    std::uint64_t r = rng();
    for (std::size_t k = 0; k < 8; ++k) bytes[i + k] = static_cast<unsigned char>(r >> (8 * k));
  }
  bytes[6] = static_cast<unsigned char>((bytes[6] & 0x0f) | 0x40);  // version 4
  bytes[8] = static_cast<unsigned char>((bytes[8] & 0x3f) | 0x80);  // RFC 4122 variant
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(36);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 0x0f];
  }
  return out;
}

std::string rfc3339_utc_now() {
  const auto now = std::chrono::system_clock::now();
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
      1'000'000;
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[80];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(micros));
  return buf;
}

bool is_digits(std::string_view s) {
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// RFC 3339 date-time: YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM).
bool is_rfc3339(std::string_view s) {
  if (s.size() < 20) return false;
  if (!is_digits(s.substr(0, 4)) || s[4] != '-' || !is_digits(s.substr(5, 2)) || s[7] != '-' ||
      !is_digits(s.substr(8, 2)) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
      !is_digits(s.substr(11, 2)) || s[13] != ':' || !is_digits(s.substr(14, 2)) || s[16] != ':' ||
      !is_digits(s.substr(17, 2))) {
    return false;
  }
  std::size_t i = 19;
  if (i < s.size() && s[i] == '.') {
    const std::size_t start = ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    if (i == start) return false;
  }
  const std::string_view zone = s.substr(i);
  if (zone == "Z" || zone == "z") return true;
  return zone.size() == 6 && (zone[0] == '+' || zone[0] == '-') && is_digits(zone.substr(1, 2)) &&
         zone[3] == ':' && is_digits(zone.substr(4, 2));
}

// Hyphenated UUID (any case) -> lowercase; throws naming nothing, the caller adds the field.
std::string normalize_uuid(const std::string& s) {
  bool ok = s.size() == 36;
  std::string out = s;
  for (std::size_t i = 0; ok && i < s.size(); ++i) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      ok = s[i] == '-';
    } else {
      ok = std::isxdigit(static_cast<unsigned char>(s[i])) != 0;
      out[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
    }
  }
  if (!ok) {
    throw Json::type_error::create(
        302, "expected a hyphenated UUID, but is \"" + s.substr(0, 64) + "\"", nullptr);
  }
  return out;
}

// "[i]", the path step of an array element. Appended, not `"[" + std::to_string(i)`: g++ 12 at -O2
// and above reports a false -Wrestrict overlap for a literal prepended to a temporary (GCC bug
// 105329).
std::string index_key(std::size_t i) {
  std::string key = "[";
  key.append(std::to_string(i)).append("]");
  return key;
}

// Wraps a value check so its message carries the field name like the structural errors do.
template <class F>
void check_field(const char* key, F&& check) {
  try {
    check();
  } catch (const Json::exception& e) {
    jf::rethrow_at(key, e);
  }
}

bool is_attachment_type(std::string_view t) {
  return t == "Image" || t == "Document" || t == "Audio" || t == "Video" || t == "Other";
}

}  // namespace

Request Request::from_text(std::string sender_id, std::string text) {
  Request r;
  r.id = random_uuid_v4();
  r.sender_id = std::move(sender_id);
  r.text = std::move(text);
  r.timestamp = rfc3339_utc_now();
  return r;
}

void StreamAccumulator::push(const StreamEvent& event) {
  switch (event.kind) {
    case StreamEvent::Kind::TextDelta:
      text_ += event.text;
      break;
    case StreamEvent::Kind::Usage:
      usage_ = event.usage;  // providers report cumulative usage once; the last report wins
      stop_reason_ = event.stop_reason;
      break;
    default:
      break;  // thinking and tool-call fragments are not answer text
  }
}

void to_json(Json& j, const Usage& v) {
  j = Json{{"input_tokens", v.input_tokens},
           {"output_tokens", v.output_tokens},
           {"cache_read_tokens", v.cache_read_tokens},
           {"cache_write_tokens", v.cache_write_tokens},
           {"cost_usd", v.cost_usd}};
}

void from_json(const Json& j, Usage& v) {
  jf::expect_object(j);
  Usage out;
  jf::defaulted(j, "input_tokens", out.input_tokens);
  jf::defaulted(j, "output_tokens", out.output_tokens);
  jf::defaulted(j, "cache_read_tokens", out.cache_read_tokens);
  jf::defaulted(j, "cache_write_tokens", out.cache_write_tokens);
  jf::defaulted(j, "cost_usd", out.cost_usd);
  v = out;
}

static void to_json(Json& j, const Attachment& v) {
  j = Json{{"file_type", v.file_type}, {"url", nullptr}, {"data", nullptr}, {"filename", nullptr}};
  if (v.url) j["url"] = *v.url;
  if (v.data) j["data"] = *v.data;
  if (v.filename) j["filename"] = *v.filename;
}

static void from_json(const Json& j, Attachment& v) {
  jf::expect_object(j);
  Attachment out;
  jf::required(j, "file_type", out.file_type);
  check_field("file_type", [&] {
    if (!is_attachment_type(out.file_type)) {
      throw Json::type_error::create(
          302,
          "expected one of Image, Document, Audio, Video, Other, but is \"" + out.file_type + "\"",
          nullptr);
    }
  });
  jf::defaulted(j, "url", out.url);
  jf::defaulted(j, "data", out.data);
  jf::defaulted(j, "filename", out.filename);
  v = std::move(out);
}

void to_json(Json& j, const Request& v) {
  j = Json{{"id", v.id},
           {"sender_id", v.sender_id},
           {"sender_name", v.sender_name ? Json(*v.sender_name) : Json(nullptr)},
           {"text", v.text},
           {"timestamp", v.timestamp},
           {"reply_to", v.reply_to ? Json(*v.reply_to) : Json(nullptr)},
           {"attachments", Json::array()},
           {"source", v.source ? Json(*v.source) : Json(nullptr)}};
  for (const Attachment& a : v.attachments) {
    Json item;
    to_json(item, a);
    j["attachments"].push_back(std::move(item));
  }
}

void from_json(const Json& j, Request& v) {
  jf::expect_object(j);
  Request out;
  jf::required(j, "id", out.id);
  check_field("id", [&] { out.id = normalize_uuid(out.id); });
  jf::required(j, "sender_id", out.sender_id);
  jf::defaulted(j, "sender_name", out.sender_name);
  jf::required(j, "text", out.text);
  jf::required(j, "timestamp", out.timestamp);
  check_field("timestamp", [&] {
    if (!is_rfc3339(out.timestamp)) {
      throw Json::type_error::create(
          302, "expected an RFC 3339 date-time, but is \"" + out.timestamp.substr(0, 64) + "\"",
          nullptr);
    }
  });
  jf::defaulted(j, "reply_to", out.reply_to);
  if (out.reply_to) check_field("reply_to", [&] { out.reply_to = normalize_uuid(*out.reply_to); });
  if (const auto it = j.find("attachments"); it != j.end()) {
    check_field("attachments", [&] {
      if (!it->is_array()) {
        throw Json::type_error::create(
            302, std::string("type must be array, but is ") + it->type_name(), nullptr);
      }
      for (std::size_t i = 0; i < it->size(); ++i) {
        check_field(index_key(i).c_str(), [&] {
          Attachment a;
          from_json((*it)[i], a);
          out.attachments.push_back(std::move(a));
        });
      }
    });
  }
  jf::defaulted(j, "source", out.source);
  v = std::move(out);
}

void to_json(Json& j, const Response& v) {
  j = Json{{"text", v.text},
           {"usage", v.usage},
           {"stop_reason", v.stop_reason},
           {"model", v.model},
           {"provider", v.provider}};
  if (!v.tool_calls.empty()) j["tool_calls"] = v.tool_calls;
  if (!v.thinking.empty()) j["thinking"] = v.thinking;
  if (!v.provider_state.is_null()) j["provider_state"] = v.provider_state;
}

void from_json(const Json& j, Response& v) {
  jf::expect_object(j);
  Response out;
  jf::defaulted(j, "text", out.text);
  jf::defaulted(j, "thinking", out.thinking);
  jf::defaulted(j, "stop_reason", out.stop_reason);
  jf::defaulted(j, "model", out.model);
  jf::defaulted(j, "provider", out.provider);
  if (auto it = j.find("usage"); it != j.end()) from_json(*it, out.usage);
  if (auto it = j.find("tool_calls"); it != j.end())
    out.tool_calls = it->get<std::vector<ToolCall>>();
  if (auto it = j.find("provider_state"); it != j.end()) out.provider_state = *it;
  v = std::move(out);
}

}  // namespace kernex
