// POST /v1/chat/completions and GET /v1/models, as OpenAI's clients expect them. The request's
// messages are the conversation; a session (X-Session-Id or metadata.session_id) ties the run to
// server state (workspace, overlay, REPL, approvals). `model` picks an agent profile of
// serve.agents, "provider/model", or a model of the default provider ("kernex": the default).
// The client's tools are offered beside the agent's; a call to one ends the run with tool_calls.
#include <ctime>
#include <set>

#include "api.hpp"
#include "kernex/log.hpp"
#include "kernex/plugin_host.hpp"
#include "openai_reply.hpp"
#include "provider_support.hpp"

namespace kernex::server {
// Which provider, model and instructions `model` names.
std::expected<void, ApiError> resolve_model(const std::string& name, const ServeConfig& config,
                                            const Kernel& kernel, RunRequest& run) {
  if (auto it = config.agents.find(name); it != config.agents.end()) {
    run.provider = it->second.provider;
    run.model = it->second.model;
    run.extra_system_prompt = it->second.system_prompt;
    run.skills = it->second.skills;
    return {};
  }
  if (name.empty() || name == "kernex") return {};
  // "provider" (its default model) or "provider/model".
  const auto slash = name.find('/');
  const std::string provider = name.substr(0, slash);
  bool is_provider = false;
  for (const auto& info : kernel.plugins().plugins()) {
    is_provider =
        is_provider || (info.ok() && info.kind == PluginKind::Provider && info.name == provider);
  }
  if (is_provider && slash == std::string::npos) {
    run.provider = provider;
    return {};
  }
  if (slash != std::string::npos) {
    if (is_provider) {
      run.provider = provider;
      if (slash + 1 < name.size()) run.model = name.substr(slash + 1);
      return {};
    }
    return std::unexpected(api_error(404, "model_not_found",
                                     "no provider '" + provider + "' for model '" + name + "'"));
  }
  run.model = name;
  return {};
}

namespace {

// History as plain context: tool calls and results from elsewhere are folded into the
// assistant's text, so any provider takes them whatever tools it is offered now.
std::vector<ContextEntry> plain_context(std::vector<ContextEntry> entries) {
  std::vector<ContextEntry> out;
  for (auto& e : entries) {
    if (e.role == "tool" && e.tool_result && !out.empty() && out.back().role == "assistant") {
      out.back().content +=
          "\n[" + e.tool_result->name + " returned: " + e.tool_result->content + "]";
      continue;
    }
    if (e.role == "tool") {
      out.push_back(ContextEntry::assistant("[" + (e.tool_result ? e.tool_result->name : "tool") +
                                            " returned: " + e.content + "]"));
      continue;
    }
    for (const auto& call : e.tool_calls) {
      e.content += (e.content.empty() ? "[called " : "\n[called ") + call.name + " with " +
                   call.arguments.dump(-1, ' ', false, Json::error_handler_t::replace) + "]";
    }
    e.tool_calls.clear();
    out.push_back(std::move(e));
  }
  return out;
}

// The turn a parked run left (its assistant's calls and its own tools' results) with the
// client's results after it, when every call it handed over is answered here; else nothing.
std::optional<std::vector<ContextEntry>> parked_turn(Runs& runs, ParkedStore* parked,
                                                     const std::string& tenant,
                                                     const std::string& session,
                                                     const std::vector<ContextEntry>& results) {
  if (!parked || results.empty() || !results.front().tool_result) return std::nullopt;
  auto run_id = parked->run_for(tenant, session, results.front().tool_result->call_id);
  if (!run_id) log(LogLevel::Error, "serve: parked calls unreadable: " + run_id.error().describe());
  if (!run_id || !*run_id) return std::nullopt;
  auto run = runs.find(tenant, **run_id);
  if (!run || run->session != session) return std::nullopt;
  const Json result = run->summary().value("result", Json::object());
  if (result.value("outcome", "") != "client_tool_calls") return std::nullopt;
  std::vector<ContextEntry> turn;
  std::set<std::string> pending, answered;
  try {
    turn = result.at("turn").get<std::vector<ContextEntry>>();
    for (const auto& c : result.at("client_tool_calls"))
      pending.insert(c.at("id").get<std::string>());
  } catch (const std::exception&) {
    return std::nullopt;  // a result of another version
  }
  for (const auto& r : results) answered.insert(r.tool_result->call_id);
  if (pending != answered) return std::nullopt;
  turn.insert(turn.end(), results.begin(), results.end());
  return turn;
}

}  // namespace

void park_calls(ParkedStore* parked, const std::string& tenant, const std::string& session,
                const std::string& run_id, const std::vector<std::string>& call_ids) {
  if (!parked || call_ids.empty()) return;
  if (auto r = parked->park(tenant, session, run_id, call_ids); !r)
    log(LogLevel::Error, "serve: run " + run_id + " not parked: " + r.error().describe());
}

namespace {

// What the model is told of response_format: a provider with native structured output holds
// it to the schema anyway, and one without needs to know (the kernel checks the answer).
std::string format_instructions(const ResponseFormat& format) {
  if (format.kind == ResponseFormat::Kind::Text) return {};
  if (format.kind == ResponseFormat::Kind::JsonObject)
    return "\n\nAnswer with a single JSON object and nothing else.";
  return "\n\nAnswer with a single JSON value and nothing else, satisfying this JSON Schema (" +
         format.name + "): " + format.schema.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string busy_hint(const std::string& session) {
  return "session '" + session +
         "' has a run in progress; retry later, or send the header X-Kernex-If-Busy: enqueue or "
         "interrupt (or leave out X-Session-Id / metadata.session_id for a run of its own)";
}

}  // namespace

std::expected<RunRequest, ApiError> Api::openai_run(const OpenAiRequest& request,
                                                    const std::string& tenant) {
  RunRequest run;
  run.tenant = tenant;
  run.api_model = request.model;
  KERNEX_RETURN_IF_ERROR(
      resolve_model(request.model, deps_.runs->config(), deps_.runs->kernel(), run));
  run.session = request.session;
  run.sender = request.user;
  run.user = request.user;
  if (!request.system.empty())
    run.extra_system_prompt += (run.extra_system_prompt.empty() ? "" : "\n\n") + request.system;
  const std::size_t last = request.last_user();
  const auto at = [&](std::size_t i) { return request.messages.begin() + static_cast<long>(i); };
  run.history = plain_context({request.messages.begin(), at(last)});
  run.message = request.messages[last].content;
  run.turn.assign(at(last + 1), request.messages.end());
  if (request.continues_tool_calls()) {
    std::size_t first_result = request.messages.size();
    while (request.messages[first_result - 1].role == "tool") --first_result;
    std::vector<ContextEntry> results(at(first_result), request.messages.end());
    if (auto parked =
            parked_turn(*deps_.runs, deps_.parked.get(), tenant, request.session, results)) {
      // Everything before the parked assistant message is the client's; the rest is the run's.
      run.turn.assign(at(last + 1), at(first_result - 1));
      run.turn.insert(run.turn.end(), parked->begin(), parked->end());
    }
  }
  run.generation = request.generation;
  run.client_tools = request.tools;
  run.extra_system_prompt += format_instructions(request.generation.response_format);
  return run;
}

HttpReply Api::chat_completions(const HttpRequest& req, const std::string& tenant) {
  auto body = parse_body(req.body);
  if (!body) return HttpReply::error(body.error());
  auto request = parse_chat_request(req, *body);
  if (!request) return HttpReply::error(request.error());
  auto run = openai_run(*request, tenant);
  if (!run) return HttpReply::error(run.error());
  // A run that stopped on the client's tools is found again by their ids, stored before anyone
  // hears of them (RunState::set_before_end), whether or not this client still reads.
  run->before_end = [parked = deps_.parked, tenant, session = request->session](
                        const RunState& r, RunStatus status, const Json& result) {
    if (status == RunStatus::Failed || !result.is_object()) return;
    std::vector<std::string> ids;
    for (const auto& c : openai_tool_calls(result)) ids.push_back(c.value("id", ""));
    park_calls(parked.get(), tenant, session, r.id, ids);
  };
  const IfBusy if_busy = request->if_busy.value_or(deps_.runs->config().if_busy);
  auto started = deps_.runs->submit(std::move(*run), if_busy);
  if (!started) {
    ApiError e = started.error();
    if (e.code == "session_busy" && e.status == 409 &&
        e.message.find("in progress") != std::string::npos)
      e.message = busy_hint(request->session);
    return HttpReply::error(e);
  }
  const ChunkHead head{"chatcmpl-" + (*started)->id, request->model, std::time(nullptr)};
  HttpReply reply;
  reply.cancel_on_disconnect = deps_.runs->config().openai.cancel_on_disconnect;
  if (request->stream) {
    reply.stream = *started;
    reply.stream_head = data_line(chunk(head, {{"role", "assistant"}, {"content", ""}}, nullptr));
    reply.render_event = [head, include_usage =
                                    request->include_usage](const RunEvent& e) -> std::string {
      if (e.name == "text_delta")
        return data_line(chunk(head, {{"content", e.data.value("text", "")}}, nullptr));
      if (e.name == "error") {
        return data_line({{"error",
                           {{"message", e.data.value("message", "")},
                            {"type", "server_error"},
                            {"code", e.data.value("code", "run_failed")}}}});
      }
      if (e.name != "run_end") return {};
      return final_chunks(head, e.data, include_usage);
    };
    reply.stream_tail = "data: [DONE]\n\n";
    return reply;
  }
  reply.wait = *started;
  reply.complete = [head](const RunState& r) {
    Json summary = r.summary();
    if (summary.contains("error")) {
      return HttpReply::json(502, {{"error",
                                    {{"message", summary["error"].value("message", "")},
                                     {"type", "server_error"},
                                     {"code", "run_failed"}}}});
    }
    const Json result = summary.value("result", Json::object());
    return HttpReply::json(200,
                           {{"id", head.id},
                            {"object", "chat.completion"},
                            {"created", head.created},
                            {"model", head.model},
                            {"choices", Json::array({{{"index", 0},
                                                      {"message", openai_message(result)},
                                                      {"logprobs", nullptr},
                                                      {"finish_reason", finish_reason(result)}}})},
                            {"usage", openai_usage(result.value("usage", Json::object()))}});
  };
  return reply;
}

HttpReply Api::models() {
  Json data = Json::array();
  const std::time_t created = std::time(nullptr);
  const Kernel& kernel = deps_.runs->kernel();
  const std::string default_provider = kernel.config().provider.name;
  auto add = [&](const std::string& id, const std::string& provider) {
    data.push_back({{"id", id},
                    {"object", "model"},
                    {"created", created},
                    {"owned_by", "kernex"},
                    {"kernex", generation_support_json(provider)}});
  };
  add("kernex", default_provider);
  for (const auto& [name, agent] : deps_.runs->config().agents)
    add(name, agent.provider.value_or(default_provider));
  for (const auto& info : kernel.plugins().plugins()) {
    if (info.ok() && info.kind == PluginKind::Provider) add(info.name, info.name);
  }
  return HttpReply::json(200, {{"object", "list"}, {"data", data}});
}

// GET /v1/models/{id}: the entry /v1/models lists under that id, or for "provider/model" of a
// provider here the model object of that provider; else OpenAI's 404 (model_not_found).
HttpReply Api::model(const std::string& id) {
  const Json listed = Json::parse(models().body, nullptr, false);
  if (listed.is_object() && listed.contains("data")) {
    for (const auto& m : listed["data"])
      if (m.is_object() && m.value("id", "") == id) return HttpReply::json(200, m);
  }
  RunRequest probe;
  const auto slash = id.find('/');
  if (slash != std::string::npos && slash + 1 < id.size() &&
      resolve_model(id, deps_.runs->config(), deps_.runs->kernel(), probe)) {
    return HttpReply::json(200, {{"id", id},
                                 {"object", "model"},
                                 {"created", std::time(nullptr)},
                                 {"owned_by", id.substr(0, slash)}});
  }
  ApiError e = api_error(404, "model_not_found", "The model '" + id + "' does not exist");
  e.param = "model";
  return HttpReply::error(e);
}

}  // namespace kernex::server
