// The HTTP API's routes: sessions, runs, events, cancel, health and metrics, and the
// OpenAI-compatible endpoints (openai_api.cpp). Auth first; every error is JSON.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "http_types.hpp"
#include "openai_parked.hpp"
#include "openai_request.hpp"
#include "response_store.hpp"
#include "route_table.hpp"
#include "runs.hpp"
#include "session_id.hpp"

namespace kernex::server {

class Api {
 public:
  struct Deps {
    Runs* runs = nullptr;
    // The tenant a request's credentials name; nullopt: refused (401). Without a keys file
    // every request is tenant "local".
    std::function<std::optional<std::string>(const HttpRequest&)> authenticate;
    std::function<std::string()> metrics_text;
    // /metrics on this listener: off (404) unless serve.metrics.token_env is set and no
    // serve.metrics.listen takes it elsewhere; then it needs `metrics_token`.
    bool metrics_here = false;
    std::string metrics_token;
    // The Responses API's stored responses (null: POST /v1/responses answers 501).
    std::shared_ptr<ResponseStore> responses;
    // Runs parked on the client's tool calls (null: a tool result is always plain context).
    std::shared_ptr<ParkedStore> parked;
  };
  explicit Api(Deps deps) : deps_(std::move(deps)) {}

  HttpReply handle(const HttpRequest& request);

 private:
  // One route of the table (api.cpp): method ("" any), pattern, who may call it, handler.
  struct RouteCall {
    const HttpRequest& req;
    const std::string& tenant;  // "" on public routes
    const RouteParams& params;
  };
  struct Route {
    std::string_view method;
    std::string_view pattern;
    RouteAuth auth;
    HttpReply (*handler)(Api&, const RouteCall&);
  };
  static const std::vector<Route>& routes();

  HttpReply route(const HttpRequest& request);
  // The route a tenant asked for, once authenticated: the session guard, 404/405, the handler.
  HttpReply tenant_route(const HttpRequest& req, const std::vector<std::string>& segments,
                         const RouteLookup<Route>& found, const std::string& tenant);
  HttpReply delete_session(const std::string& tenant, const std::string& session);
  HttpReply session_history(const HttpRequest& req, const std::string& tenant,
                            const std::string& session);
  HttpReply session_runs(const HttpRequest& req, const std::string& tenant,
                         const std::string& session);
  HttpReply run_summary(const std::string& tenant, const std::string& run_id);
  HttpReply cancel_run(const std::string& tenant, const std::string& run_id);
  HttpReply post_message(const HttpRequest& req, const std::string& tenant,
                         const std::string& session);
  HttpReply run_events(const HttpRequest& req, const std::string& tenant,
                       const std::string& run_id);
  // approvals_api.cpp: POST /v1/approvals/{id}, GET /v1/sessions/{session}/approvals.
  HttpReply post_approval(const HttpRequest& req, const std::string& tenant, const std::string& id);
  HttpReply session_approvals(const std::string& tenant, const std::string& session);
  HttpReply chat_completions(const HttpRequest& req, const std::string& tenant);
  // openai_api.cpp: the run an OpenAI request asks for (model, conversation, tools, session).
  std::expected<RunRequest, ApiError> openai_run(const OpenAiRequest& request,
                                                 const std::string& tenant);
  HttpReply models();
  HttpReply model(const std::string& id);  // GET /v1/models/{id}
  // responses_api.cpp: POST /v1/responses, GET and DELETE /v1/responses/{id}.
  HttpReply responses(const HttpRequest& req, const std::string& tenant);
  HttpReply response_by_id(const HttpRequest& req, const std::string& tenant,
                           const std::string& id);

  Deps deps_;
};

// openai_api.cpp: which provider, model and instructions an OpenAI `model` names (an agent
// profile of serve.agents, "provider", "provider/model", or a model of the default provider).
std::expected<void, ApiError> resolve_model(const std::string& name, const ServeConfig& config,
                                            const Kernel& kernel, RunRequest& run);

// openai_api.cpp: remembers that `run_id` stopped on the client's `call_ids` (an error is logged:
// the client's results are then plain context).
void park_calls(ParkedStore* parked, const std::string& tenant, const std::string& session,
                const std::string& run_id, const std::vector<std::string>& call_ids);

// The parsed JSON object of a request body, or a 400 naming what was wrong.
std::expected<Json, ApiError> parse_body(const std::string& body);
// The native SSE text of one event: "event: NAME\nid: N\ndata: JSON\n\n".
std::string render_native(const RunEvent& event);
bool wants_stream(const HttpRequest& req, const Json& body);

// metrics_access.cpp: GET /metrics for the holder of `token` (empty: anyone who reaches it, the
// separate listener without a token), and the separate listener's router (/metrics only).
HttpReply metrics_reply(const HttpRequest& req, const std::string& token,
                        const std::function<std::string()>& text);
HttpReply metrics_listener_reply(const HttpRequest& req, const std::string& token,
                                 const std::function<std::string()>& text);

}  // namespace kernex::server
