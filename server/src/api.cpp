#include "api.hpp"
#include "session_overlay.hpp"

#include <algorithm>
#include <charconv>
#include <vector>

namespace kernex::server {
namespace {

// The path's segments, each decoded after splitting: "%2F" inside a session id is part of it.
std::vector<std::string> segments(const HttpRequest& req) {
  const std::string& path = req.raw_path.empty() ? req.path : req.raw_path;
  const bool raw = !req.raw_path.empty();
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '/') {
      ++i;
      continue;
    }
    const std::size_t j = path.find('/', i);
    std::string seg = path.substr(i, j == std::string::npos ? std::string::npos : j - i);
    out.push_back(raw ? percent_decode(seg, false) : std::move(seg));
    i = j == std::string::npos ? path.size() : j;
  }
  return out;
}

// Deeper nesting than any real request is refused before parsing (the parser and the JSON
// value's destructor would otherwise recurse as deep as a hostile body likes).
bool nesting_within(const std::string& text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

std::optional<std::size_t> size_param(const HttpRequest& req, const std::string& name,
                                      std::size_t fallback, std::size_t max) {
  auto it = req.query.find(name);
  if (it == req.query.end()) return fallback;
  std::size_t v = 0;
  auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  if (ec != std::errc() || end != it->second.data() + it->second.size() || v == 0 || v > max)
    return std::nullopt;
  return v;
}

ApiError method_not_allowed(const HttpRequest& req) {
  return api_error(405, "method_not_allowed", req.method + " is not allowed on " + req.path);
}

}  // namespace

HttpReply HttpReply::json(int status, const Json& body) {
  HttpReply r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return r;
}

HttpReply HttpReply::error(const ApiError& e) {
  Json body{{"code", e.code}, {"message", e.message}};
  if (!e.param.empty()) {
    body["param"] = e.param;
    body["type"] = "invalid_request_error";
  }
  HttpReply r = json(e.status, Json{{"error", std::move(body)}});
  if (e.retry_after_s) r.headers.emplace_back("Retry-After", std::to_string(*e.retry_after_s));
  if (e.status == 405) r.headers.emplace_back("Allow", "GET, POST, DELETE");
  return r;
}

std::expected<Json, ApiError> parse_body(const std::string& body) {
  if (!nesting_within(body, 64))
    return std::unexpected(api_error(400, "invalid_json", "the body nests deeper than 64 levels"));
  Json j = Json::parse(body, nullptr, false);
  if (j.is_discarded())
    return std::unexpected(api_error(400, "invalid_json", "the body is not valid JSON"));
  if (!j.is_object())
    return std::unexpected(api_error(400, "invalid_request", "expected a JSON object as the body"));
  return j;
}

std::string render_native(const RunEvent& e) {
  return "event: " + e.name + "\nid: " + std::to_string(e.id) +
         "\ndata: " + e.data.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

bool wants_stream(const HttpRequest& req, const Json& body) {
  if (auto it = body.find("stream"); it != body.end() && it->is_boolean()) return it->get<bool>();
  return req.header("accept").find("text/event-stream") != std::string::npos;
}

// Browser pages of the configured origins may call the API; everyone else gets no CORS headers.
HttpReply Api::handle(const HttpRequest& req) {
  const std::string origin = req.header("origin");
  const auto& allowed = deps_.runs->config().cors_origins;
  const bool cors =
      !origin.empty() && std::any_of(allowed.begin(), allowed.end(),
                                     [&](const std::string& o) { return o == "*" || o == origin; });
  if (cors && req.method == "OPTIONS") {
    HttpReply r = HttpReply::json(204, nullptr);
    r.body.clear();
    r.headers = {{"Access-Control-Allow-Origin", origin},
                 {"Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS"},
                 {"Access-Control-Allow-Headers",
                  "Authorization, Content-Type, Last-Event-ID, X-Session-Id"},
                 {"Access-Control-Max-Age", "600"},
                 {"Vary", "Origin"}};
    return r;
  }
  HttpReply reply = route(req);
  if (cors) {
    reply.headers.emplace_back("Access-Control-Allow-Origin", origin);
    reply.headers.emplace_back("Vary", "Origin");
  }
  return reply;
}

HttpReply Api::route(const HttpRequest& req) {
  const std::vector<std::string> seg = segments(req);
  if (seg.size() == 1 && seg[0] == "healthz") {
    if (req.method != "GET") return HttpReply::error(method_not_allowed(req));
    return HttpReply::json(200, {{"status", "ok"}});
  }
  if (seg.size() == 1 && seg[0] == "metrics" && deps_.metrics_here)
    return metrics_reply(req, deps_.metrics_token, deps_.metrics_text);
  if (seg.empty() || seg[0] != "v1") {
    return HttpReply::error(api_error(404, "not_found", "no route " + req.path));
  }
  auto tenant = deps_.authenticate(req);
  if (!tenant) {
    HttpReply r = HttpReply::error(
        api_error(401, "unauthorized", "send Authorization: Bearer <key> with a valid key"));
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
  }
  HttpReply reply = [&]() -> HttpReply {
    if (seg.size() >= 3 && seg[1] == "sessions") {
      const std::string& session = seg[2];
      if (!valid_session_id(session)) {
        return HttpReply::error(
            api_error(400, "invalid_session",
                      "session ids are 1-256 bytes of UTF-8 without control characters"));
      }
      // Sessions are per tenant: one this tenant never used (another tenant's, say) is not found.
      const bool reads = (seg.size() == 3 && req.method == "DELETE") ||
                         (seg.size() == 4 && req.method == "GET" &&
                          (seg[3] == "messages" || seg[3] == "runs" || seg[3] == "approvals"));
      if (reads && !deps_.runs->session_exists(*tenant, session)) {
        return HttpReply::error(api_error(404, "not_found", "no session '" + session + "'"));
      }
      if (seg.size() >= 4 && seg[3] == "workspace")
        return workspace_route(req, *deps_.runs, *tenant, session,
                               std::vector<std::string>(seg.begin() + 4, seg.end()));
      if (seg.size() == 3) {
        if (req.method != "DELETE") return HttpReply::error(method_not_allowed(req));
        auto done = deps_.runs->forget(*tenant, session);
        if (!done) return HttpReply::error(done.error());
        if (deps_.responses) {
          if (auto gone = deps_.responses->delete_session(*tenant, session); !gone)
            return HttpReply::error(api_error(500, "store_failed", gone.error().describe()));
        }
        return HttpReply::json(200, {{"deleted", true}, {"session_id", session}});
      }
      if (seg.size() == 4 && seg[3] == "messages") {
        if (req.method == "POST") return post_message(req, *tenant, session);
        if (req.method != "GET") return HttpReply::error(method_not_allowed(req));
        auto limit = size_param(req, "limit", 50, 1000);
        if (!limit)
          return HttpReply::error(api_error(400, "invalid_request", "limit: expected 1-1000"));
        std::optional<std::int64_t> before;
        if (req.query.contains("before")) {
          auto b = size_param(req, "before", 0, INT64_MAX);
          if (!b)
            return HttpReply::error(
                api_error(400, "invalid_request", "before: expected a message seq"));
          before = static_cast<std::int64_t>(*b);
        }
        auto h = deps_.runs->history(*tenant, session, *limit, before);
        return h ? HttpReply::json(200, *h) : HttpReply::error(h.error());
      }
      if (seg.size() == 4 && seg[3] == "runs") {
        if (req.method != "GET") return HttpReply::error(method_not_allowed(req));
        auto limit = size_param(req, "limit", 100, 1000);
        if (!limit)
          return HttpReply::error(api_error(400, "invalid_request", "limit: expected 1-1000"));
        auto runs = deps_.runs->session_runs(*tenant, session, *limit);
        return runs ? HttpReply::json(200, *runs) : HttpReply::error(runs.error());
      }
      if (seg.size() == 4 && seg[3] == "approvals") {
        if (req.method != "GET") return HttpReply::error(method_not_allowed(req));
        return session_approvals(*tenant, session);
      }
    }
    if (seg.size() >= 3 && seg[1] == "runs") {
      const std::string& run_id = seg[2];
      if (seg.size() == 3) {
        if (req.method != "GET") return HttpReply::error(method_not_allowed(req));
        auto run = deps_.runs->find(*tenant, run_id);
        if (!run) return HttpReply::error(api_error(404, "not_found", "no run '" + run_id + "'"));
        return HttpReply::json(200, run->summary());
      }
      if (seg.size() == 4 && seg[3] == "events") {
        if (req.method != "GET") return HttpReply::error(method_not_allowed(req));
        return run_events(req, *tenant, run_id);
      }
      if (seg.size() == 4 && seg[3] == "cancel") {
        if (req.method != "POST") return HttpReply::error(method_not_allowed(req));
        auto run = deps_.runs->cancel(*tenant, run_id);
        if (!run) return HttpReply::error(run.error());
        return HttpReply::json(
            202, {{"run_id", run_id}, {"status", std::string(to_string((*run)->status()))}});
      }
    }
    if (seg.size() == 3 && seg[1] == "approvals") {
      if (req.method != "POST") return HttpReply::error(method_not_allowed(req));
      return post_approval(req, *tenant, seg[2]);
    }
    if (seg.size() == 3 && seg[1] == "chat" && seg[2] == "completions") {
      if (req.method != "POST") return HttpReply::error(method_not_allowed(req));
      return chat_completions(req, *tenant);
    }
    if (seg.size() == 2 && seg[1] == "models") {
      if (req.method != "GET") return HttpReply::error(method_not_allowed(req));
      return models();
    }
    if (seg.size() == 3 && seg[1] == "models") {
      if (req.method != "GET") return HttpReply::error(method_not_allowed(req));
      return model(seg[2]);
    }
    if (seg.size() == 2 && seg[1] == "responses") {
      if (req.method != "POST") return HttpReply::error(method_not_allowed(req));
      return responses(req, *tenant);
    }
    if (seg.size() == 3 && seg[1] == "responses") return response_by_id(req, *tenant, seg[2]);
    return HttpReply::error(api_error(404, "not_found", "no route " + req.path));
  }();
  reply.tenant = *tenant;
  return reply;
}

HttpReply Api::post_message(const HttpRequest& req, const std::string& tenant,
                            const std::string& session) {
  auto body = parse_body(req.body);
  if (!body) return HttpReply::error(body.error());
  const Json& b = *body;
  for (const auto& [key, value] : b.items()) {
    if (key != "message" && key != "sender" && key != "skills" && key != "stream" &&
        key != "if_busy") {
      return HttpReply::error(api_error(
          400, "invalid_request",
          "unknown field '" + key + "' (expected message, sender, skills, stream, if_busy)"));
    }
  }
  RunRequest run;
  run.tenant = tenant;
  run.session = session;
  if (!b.contains("message") || !b["message"].is_string() ||
      b["message"].get<std::string>().empty()) {
    return HttpReply::error(
        api_error(400, "invalid_request", "message: expected a non-empty string"));
  }
  run.message = b["message"].get<std::string>();
  if (b.contains("sender")) {
    if (!b["sender"].is_string() || b["sender"].get<std::string>().size() > 256) {
      return HttpReply::error(
          api_error(400, "invalid_request", "sender: expected a string of at most 256 bytes"));
    }
    run.sender = b["sender"].get<std::string>();
  }
  if (b.contains("skills")) {
    if (!b["skills"].is_array())
      return HttpReply::error(
          api_error(400, "invalid_request", "skills: expected a list of skill names"));
    for (const auto& s : b["skills"]) {
      if (!s.is_string())
        return HttpReply::error(
            api_error(400, "invalid_request", "skills: expected a list of skill names"));
      run.skills.push_back(s.get<std::string>());
    }
  }
  if (b.contains("stream") && !b["stream"].is_boolean()) {
    return HttpReply::error(api_error(400, "invalid_request", "stream: expected true or false"));
  }
  IfBusy policy = deps_.runs->config().if_busy;
  if (b.contains("if_busy")) {
    auto p =
        b["if_busy"].is_string() ? parse_if_busy(b["if_busy"].get<std::string>()) : std::nullopt;
    if (!p)
      return HttpReply::error(
          api_error(400, "invalid_request", "if_busy: expected reject, enqueue or interrupt"));
    policy = *p;
  }
  const bool stream = wants_stream(req, b);
  auto started = deps_.runs->submit(std::move(run), policy);
  if (!started) return HttpReply::error(started.error());
  HttpReply reply;
  if (stream) {
    reply.stream = *started;
    reply.render_event = render_native;
    reply.render_key = "native";
    return reply;
  }
  reply.wait = *started;
  reply.complete = [](const RunState& r) {
    Json summary = r.summary();
    Json body = summary.contains("result") ? summary["result"] : Json::object();
    body["run_id"] = r.id;
    body["session_id"] = r.session;
    body["status"] = summary["status"];
    if (summary.contains("error")) {
      return HttpReply::json(
          502,
          {{"error", {{"code", "run_failed"}, {"message", summary["error"].value("message", "")}}},
           {"run_id", r.id},
           {"session_id", r.session},
           {"status", "failed"}});
    }
    return HttpReply::json(200, body);
  };
  return reply;
}

HttpReply Api::run_events(const HttpRequest& req, const std::string& tenant,
                          const std::string& run_id) {
  auto run = deps_.runs->find(tenant, run_id);
  if (!run) return HttpReply::error(api_error(404, "not_found", "no run '" + run_id + "'"));
  std::string last = req.header("last-event-id");
  if (last.empty()) {
    if (auto it = req.query.find("last_event_id"); it != req.query.end()) last = it->second;
  }
  std::uint64_t after = 0;
  if (!last.empty()) {
    auto [end, ec] = std::from_chars(last.data(), last.data() + last.size(), after);
    if (ec != std::errc() || end != last.data() + last.size()) {
      return HttpReply::error(api_error(400, "invalid_request",
                                        "Last-Event-ID: expected an event id (a whole number)"));
    }
  }
  HttpReply reply;
  reply.stream = run;
  reply.stream_after = after;
  reply.render_event = render_native;
  reply.render_key = "native";
  return reply;
}

}  // namespace kernex::server
