#include "kernex/mcp/jsonrpc.hpp"

#include <algorithm>
#include <istream>

namespace kernex::mcp {

bool is_supported_protocol_version(std::string_view version) {
  return std::find(kProtocolVersions.begin(), kProtocolVersions.end(), version) !=
         kProtocolVersions.end();
}

namespace jsonrpc {

Json request(const Json& id, std::string_view method, const std::optional<Json>& params) {
  Json j = {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}};
  if (params) j["params"] = *params;
  return j;
}

Json notification(std::string_view method, const std::optional<Json>& params) {
  Json j = {{"jsonrpc", "2.0"}, {"method", method}};
  if (params) j["params"] = *params;
  return j;
}

Json result(const Json& id, Json result) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

Json error(const Json& id, int code, std::string_view message, const std::optional<Json>& data) {
  Json err = {{"code", code}, {"message", message}};
  if (data) err["data"] = *data;
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", std::move(err)}};
}

std::string frame(const Json& message) {
  std::string out = message.dump(-1, ' ', false, Json::error_handler_t::replace);
  out.push_back('\n');
  return out;
}

namespace {
bool valid_id(const Json& id) {
  return id.is_string() || id.is_number_integer() || id.is_number_unsigned();
}
}  // namespace

Message classify(const Json& v) {
  Message m;
  if (!v.is_object()) {
    m.problem = std::string("expected a JSON-RPC message object, got ") + v.type_name();
    return m;
  }
  auto version = v.find("jsonrpc");
  if (version == v.end() || *version != "2.0") {
    m.problem = "missing \"jsonrpc\": \"2.0\"";
    return m;
  }
  auto method = v.find("method");
  auto id = v.find("id");
  if (method != v.end()) {
    if (!method->is_string()) {
      m.problem = "\"method\" must be a string";
      return m;
    }
    m.method = method->get<std::string>();
    if (auto p = v.find("params"); p != v.end()) {
      if (!p->is_object() && !p->is_array()) {
        m.problem = "\"params\" must be an object or an array";
        return m;
      }
      m.params = *p;
    }
    if (id == v.end()) {
      m.kind = Kind::Notification;
      return m;
    }
    if (!valid_id(*id)) {
      m.problem = "\"id\" must be a string or an integer";
      return m;
    }
    m.id = *id;
    m.kind = Kind::Request;
    return m;
  }
  if (id == v.end()) {
    m.problem = "neither \"method\" nor \"id\"";
    return m;
  }
  m.id = *id;
  auto res = v.find("result");
  auto err = v.find("error");
  if (err != v.end()) {
    if (!err->is_object() || !err->contains("code") || !(*err)["code"].is_number_integer()) {
      m.problem = "\"error\" must be an object with an integer \"code\"";
      return m;
    }
    m.error = *err;
    m.kind = Kind::Response;
    return m;
  }
  if (res == v.end()) {
    m.problem = "a response needs \"result\" or \"error\"";
    return m;
  }
  m.result = *res;
  m.kind = Kind::Response;
  return m;
}

Result<Json> parse_line(std::string_view line) {
  if (json_nests_deeper_than(line, kMaxJsonDepth)) {
    return fail(ErrorCode::Parse,
                "a message nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  Json j = Json::parse(line.begin(), line.end(), nullptr, false);
  if (j.is_discarded()) {
    std::string shown(line.substr(0, 120));
    if (line.size() > 120) shown += "...";
    return fail(ErrorCode::Parse, "not JSON: '" + shown + "'");
  }
  return j;
}

LineRead read_line(std::istream& in, std::string& line, std::size_t max_bytes) {
  line.clear();
  bool too_long = false;
  bool read_any = false;
  char buf[64 * 1024];
  for (;;) {
    // getline stops at '\n' (extracted, not stored), at a full buffer (failbit) or at the end.
    in.getline(buf, sizeof buf);
    const auto extracted = static_cast<std::size_t>(in.gcount());
    const bool full = in.fail() && !in.eof() && extracted == sizeof buf - 1;
    const bool newline = !in.fail() && !in.eof();
    const std::size_t stored = newline ? extracted - 1 : extracted;
    read_any = read_any || extracted > 0;
    if (!too_long && line.size() + stored > max_bytes) {
      too_long = true;
      line.clear();
      line.shrink_to_fit();
    }
    if (!too_long) line.append(buf, stored);
    if (full) {
      in.clear(in.rdstate() & ~std::ios::failbit);
      continue;
    }
    if (!read_any) return LineRead::End;
    return too_long ? LineRead::TooLong : LineRead::Line;
  }
}

}  // namespace jsonrpc
}  // namespace kernex::mcp
