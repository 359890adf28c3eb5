#include "api.hpp"
#include "session_overlay.hpp"

#include <algorithm>
#include <charconv>
#include <vector>

namespace kernex::server {
namespace {

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

// The API's routes. Sessions and runs are per tenant: another tenant's is not found.
const std::vector<Api::Route>& Api::routes() {
  using A = RouteAuth;
  static const std::vector<Route> table{
      {"GET", "/healthz", A::Public,
       [](Api&, const RouteCall&) {
         return HttpReply::json(200, {{"status", "ok"}});
       }},
      {"", "/metrics", A::Public,
       [](Api& api, const RouteCall& c) {
         if (!api.deps_.metrics_here)
           return HttpReply::error(api_error(404, "not_found", "no route " + c.req.path));
         return metrics_reply(c.req, api.deps_.metrics_token, api.deps_.metrics_text);
       }},
      {"DELETE", "/v1/sessions/{session}", A::TenantSession,
       [](Api& api, const RouteCall& c) {
         return api.delete_session(c.tenant, c.params["session"]);
       }},
      {"GET", "/v1/sessions/{session}/messages", A::TenantSession,
       [](Api& api, const RouteCall& c) {
         return api.session_history(c.req, c.tenant, c.params["session"]);
       }},
      {"POST", "/v1/sessions/{session}/messages", A::Tenant,
       [](Api& api, const RouteCall& c) {
         return api.post_message(c.req, c.tenant, c.params["session"]);
       }},
      {"GET", "/v1/sessions/{session}/runs", A::TenantSession,
       [](Api& api, const RouteCall& c) {
         return api.session_runs(c.req, c.tenant, c.params["session"]);
       }},
      {"GET", "/v1/sessions/{session}/approvals", A::TenantSession,
       [](Api& api, const RouteCall& c) {
         return api.session_approvals(c.tenant, c.params["session"]);
       }},
      // The overlay review (session_overlay.cpp) answers its own methods and unknown actions.
      {"", "/v1/sessions/{session}/workspace/{action...}", A::Tenant,
       [](Api& api, const RouteCall& c) {
         return workspace_route(c.req, *api.deps_.runs, c.tenant, c.params["session"],
                                c.params.rest);
       }},
      {"GET", "/v1/runs/{run}", A::Tenant,
       [](Api& api, const RouteCall& c) { return api.run_summary(c.tenant, c.params["run"]); }},
      {"GET", "/v1/runs/{run}/events", A::Tenant,
       [](Api& api, const RouteCall& c) {
         return api.run_events(c.req, c.tenant, c.params["run"]);
       }},
      {"POST", "/v1/runs/{run}/cancel", A::Tenant,
       [](Api& api, const RouteCall& c) { return api.cancel_run(c.tenant, c.params["run"]); }},
      {"POST", "/v1/approvals/{id}", A::Tenant,
       [](Api& api, const RouteCall& c) {
         return api.post_approval(c.req, c.tenant, c.params["id"]);
       }},
      {"POST", "/v1/chat/completions", A::Tenant,
       [](Api& api, const RouteCall& c) { return api.chat_completions(c.req, c.tenant); }},
      {"GET", "/v1/models", A::Tenant, [](Api& api, const RouteCall&) { return api.models(); }},
      {"GET", "/v1/models/{id}", A::Tenant,
       [](Api& api, const RouteCall& c) { return api.model(c.params["id"]); }},
      {"POST", "/v1/responses", A::Tenant,
       [](Api& api, const RouteCall& c) { return api.responses(c.req, c.tenant); }},
      // GET and DELETE; without a response store every method is answered 404.
      {"", "/v1/responses/{id}", A::Tenant,
       [](Api& api, const RouteCall& c) {
         return api.response_by_id(c.req, c.tenant, c.params["id"]);
       }},
  };
  return table;
}

HttpReply Api::route(const HttpRequest& req) {
  const std::vector<std::string> seg = path_segments(req);
  const RouteLookup<Route> found = find_route<Route>(routes(), req, seg);
  // Every path under /v1 needs a tenant, one no route serves included: a caller without a key
  // learns nothing about the API.
  const bool needs_tenant = found.route != nullptr ? found.route->auth != RouteAuth::Public
                                                   : !seg.empty() && seg[0] == "v1";
  if (!needs_tenant) {
    if (found.route != nullptr) return found.route->handler(*this, {req, {}, found.params});
    if (found.path_known) return HttpReply::error(method_not_allowed(req));
    return HttpReply::error(api_error(404, "not_found", "no route " + req.path));
  }
  auto tenant = deps_.authenticate(req);
  if (!tenant) {
    HttpReply r = HttpReply::error(
        api_error(401, "unauthorized", "send Authorization: Bearer <key> with a valid key"));
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
  }
  HttpReply reply = tenant_route(req, seg, found, *tenant);
  reply.tenant = *tenant;
  return reply;
}

HttpReply Api::tenant_route(const HttpRequest& req, const std::vector<std::string>& seg,
                            const RouteLookup<Route>& found, const std::string& tenant) {
  // Any path under a session names a valid id, whether a route serves it or not.
  if (seg.size() >= 3 && seg[1] == "sessions" && !valid_session_id(seg[2])) {
    return HttpReply::error(api_error(
        400, "invalid_session", "session ids are 1-256 bytes of UTF-8 without control characters"));
  }
  if (!found.path_known)
    return HttpReply::error(api_error(404, "not_found", "no route " + req.path));
  if (found.route == nullptr) return HttpReply::error(method_not_allowed(req));
  if (found.route->auth == RouteAuth::TenantSession) {
    const std::string& session = found.params["session"];
    if (!deps_.runs->session_exists(tenant, session))
      return HttpReply::error(api_error(404, "not_found", "no session '" + session + "'"));
  }
  return found.route->handler(*this, {req, tenant, found.params});
}

HttpReply Api::delete_session(const std::string& tenant, const std::string& session) {
  auto done = deps_.runs->forget(tenant, session);
  if (!done) return HttpReply::error(done.error());
  // After the runs: in a cluster a run's end may still put these on another node, fenced by the
  // run's row (ResponseStore::put), which forget() deleted.
  if (deps_.responses) {
    if (auto gone = deps_.responses->delete_session(tenant, session); !gone)
      return HttpReply::error(api_error(500, "store_failed", gone.error().describe()));
  }
  if (deps_.parked) {
    if (auto gone = deps_.parked->delete_session(tenant, session); !gone)
      return HttpReply::error(api_error(500, "store_failed", gone.error().describe()));
  }
  return HttpReply::json(200, {{"deleted", true}, {"session_id", session}});
}

HttpReply Api::session_history(const HttpRequest& req, const std::string& tenant,
                               const std::string& session) {
  auto limit = size_param(req, "limit", 50, 1000);
  if (!limit) return HttpReply::error(api_error(400, "invalid_request", "limit: expected 1-1000"));
  std::optional<std::int64_t> before;
  if (req.query.contains("before")) {
    auto b = size_param(req, "before", 0, INT64_MAX);
    if (!b)
      return HttpReply::error(api_error(400, "invalid_request", "before: expected a message seq"));
    before = static_cast<std::int64_t>(*b);
  }
  auto h = deps_.runs->history(tenant, session, *limit, before);
  return h ? HttpReply::json(200, *h) : HttpReply::error(h.error());
}

HttpReply Api::session_runs(const HttpRequest& req, const std::string& tenant,
                            const std::string& session) {
  auto limit = size_param(req, "limit", 100, 1000);
  if (!limit) return HttpReply::error(api_error(400, "invalid_request", "limit: expected 1-1000"));
  auto runs = deps_.runs->session_runs(tenant, session, *limit);
  return runs ? HttpReply::json(200, *runs) : HttpReply::error(runs.error());
}

HttpReply Api::run_summary(const std::string& tenant, const std::string& run_id) {
  auto run = deps_.runs->find(tenant, run_id);
  if (!run) return HttpReply::error(api_error(404, "not_found", "no run '" + run_id + "'"));
  return HttpReply::json(200, run->summary());
}

HttpReply Api::cancel_run(const std::string& tenant, const std::string& run_id) {
  auto run = deps_.runs->cancel(tenant, run_id);
  if (!run) return HttpReply::error(run.error());
  return HttpReply::json(
      202, {{"run_id", run_id}, {"status", std::string(to_string((*run)->status()))}});
}

// The run a POST /v1/sessions/{session}/messages body asks for, and its if_busy policy.
static std::expected<std::pair<RunRequest, IfBusy>, ApiError> message_run(const Json& b,
                                                                          IfBusy policy) {
  for (const auto& [key, value] : b.items()) {
    if (key != "message" && key != "sender" && key != "skills" && key != "stream" &&
        key != "if_busy") {
      return std::unexpected(api_error(
          400, "invalid_request",
          "unknown field '" + key + "' (expected message, sender, skills, stream, if_busy)"));
    }
  }
  RunRequest run;
  if (!b.contains("message") || !b["message"].is_string() ||
      b["message"].get<std::string>().empty()) {
    return std::unexpected(
        api_error(400, "invalid_request", "message: expected a non-empty string"));
  }
  run.message = b["message"].get<std::string>();
  if (b.contains("sender")) {
    if (!b["sender"].is_string() || b["sender"].get<std::string>().size() > 256) {
      return std::unexpected(
          api_error(400, "invalid_request", "sender: expected a string of at most 256 bytes"));
    }
    run.sender = b["sender"].get<std::string>();
  }
  if (b.contains("skills")) {
    const ApiError bad =
        api_error(400, "invalid_request", "skills: expected a list of skill names");
    if (!b["skills"].is_array()) return std::unexpected(bad);
    for (const auto& s : b["skills"]) {
      if (!s.is_string()) return std::unexpected(bad);
      run.skills.push_back(s.get<std::string>());
    }
  }
  if (b.contains("stream") && !b["stream"].is_boolean())
    return std::unexpected(api_error(400, "invalid_request", "stream: expected true or false"));
  if (b.contains("if_busy")) {
    auto p =
        b["if_busy"].is_string() ? parse_if_busy(b["if_busy"].get<std::string>()) : std::nullopt;
    if (!p)
      return std::unexpected(
          api_error(400, "invalid_request", "if_busy: expected reject, enqueue or interrupt"));
    policy = *p;
  }
  return std::pair{std::move(run), policy};
}

HttpReply Api::post_message(const HttpRequest& req, const std::string& tenant,
                            const std::string& session) {
  auto body = parse_body(req.body);
  if (!body) return HttpReply::error(body.error());
  const Json& b = *body;
  auto asked = message_run(b, deps_.runs->config().if_busy);
  if (!asked) return HttpReply::error(asked.error());
  auto [run, policy] = std::move(*asked);
  run.tenant = tenant;
  run.session = session;
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
    // Moved out: the summary is dropped after this.
    Json body = summary.contains("result") ? std::move(summary["result"]) : Json::object();
    body["run_id"] = r.id;
    body["session_id"] = r.session;
    body["status"] = summary["status"];
    if (summary.contains("error")) {
      // A run whose row could not be stored never started (RunManager::end_unrecorded).
      const Json& error = summary["error"];
      if (error.value("code", "") == "store_failed")
        return HttpReply::error(api_error(500, "store_failed", error.value("message", "")));
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
