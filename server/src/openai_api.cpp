// POST /v1/chat/completions and GET /v1/models, as OpenAI's clients expect them. The kernel
// runs its own tools; the client sees the assistant's text. `model` picks an agent profile of
// serve.agents, "provider/model", or a model of the default provider ("kernex": the default).
#include <ctime>

#include "api.hpp"
#include "kernex/plugin_host.hpp"

namespace kernex::server {
namespace {

std::expected<std::string, ApiError> content_text(const Json& content, std::size_t index) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return std::string();
  if (!content.is_array()) {
    return std::unexpected(api_error(
        400, "invalid_request",
        "messages[" + std::to_string(index) + "].content: expected a string or a list of parts"));
  }
  std::string text;
  for (const auto& part : content) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
        !part.contains("text") || !part["text"].is_string()) {
      return std::unexpected(api_error(
          400, "invalid_request",
          "messages[" + std::to_string(index) + "].content: only text parts are supported"));
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

}  // namespace

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

Json chunk(const std::string& id, const std::string& model, std::time_t created, Json delta,
           const Json& finish_reason) {
  return {{"id", id},
          {"object", "chat.completion.chunk"},
          {"created", created},
          {"model", model},
          {"choices",
           Json::array(
               {{{"index", 0}, {"delta", std::move(delta)}, {"finish_reason", finish_reason}}})}};
}

std::string data_line(const Json& j) {
  return "data: " + j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

Json openai_usage(const Json& usage) {
  const std::uint64_t in = usage.value("input_tokens", std::uint64_t{0});
  const std::uint64_t out = usage.value("output_tokens", std::uint64_t{0});
  return {{"prompt_tokens", in}, {"completion_tokens", out}, {"total_tokens", in + out}};
}

std::string finish_reason(const Json& result) {
  const std::string outcome = result.value("outcome", "end_turn");
  return outcome == "end_turn" ? "stop" : "length";
}

}  // namespace

HttpReply Api::chat_completions(const HttpRequest& req, const std::string& tenant) {
  auto parsed = parse_body(req.body);
  if (!parsed) return HttpReply::error(parsed.error());
  const Json& b = *parsed;
  if (!b.contains("model") || !b["model"].is_string()) {
    return HttpReply::error(api_error(400, "invalid_request", "model: expected a string"));
  }
  if (!b.contains("messages") || !b["messages"].is_array() || b["messages"].empty()) {
    return HttpReply::error(
        api_error(400, "invalid_request", "messages: expected a non-empty list"));
  }
  if (b.contains("stream") && !b["stream"].is_boolean() && !b["stream"].is_null()) {
    return HttpReply::error(api_error(400, "invalid_request", "stream: expected true or false"));
  }
  RunRequest run;
  run.tenant = tenant;
  run.api_model = b["model"].get<std::string>();
  if (auto r = resolve_model(run.api_model, deps_.runs->config(), deps_.runs->kernel(), run); !r) {
    return HttpReply::error(r.error());
  }
  std::string session = req.header("x-session-id");
  if (session.empty() && b.contains("user") && b["user"].is_string())
    session = b["user"].get<std::string>();
  if (!session.empty() && !valid_session_id(session)) {
    return HttpReply::error(
        api_error(400, "invalid_session",
                  "session ids (user / X-Session-Id) are 1-256 bytes of UTF-8 without control "
                  "characters"));
  }
  run.session = session;

  std::vector<ContextEntry> history;
  std::string system;
  const Json& messages = b["messages"];
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return HttpReply::error(api_error(
          400, "invalid_request", "messages[" + std::to_string(i) + "].role: expected a string"));
    }
    const std::string role = m["role"].get<std::string>();
    auto text = content_text(m.value("content", Json()), i);
    if (!text) return HttpReply::error(text.error());
    if (role == "system" || role == "developer") {
      system += (system.empty() ? "" : "\n\n") + *text;
    } else if (role == "user" || role == "assistant") {
      history.push_back(role == "user" ? ContextEntry::user(*text)
                                       : ContextEntry::assistant(*text));
    } else if (role != "tool") {
      return HttpReply::error(
          api_error(400, "invalid_request",
                    "messages[" + std::to_string(i) +
                        "].role: expected system, developer, user, assistant or tool"));
    }
  }
  if (history.empty() || history.back().role != "user") {
    return HttpReply::error(
        api_error(400, "invalid_request", "messages: the last message must be the user's"));
  }
  run.message = history.back().content;
  history.pop_back();
  if (!system.empty())
    run.extra_system_prompt += (run.extra_system_prompt.empty() ? "" : "\n\n") + system;
  // With a session the kernel's memory is the history; without one the request is the whole
  // context.
  if (session.empty()) run.history = std::move(history);

  const bool stream = wants_stream(req, b);
  const bool include_usage = b.contains("stream_options") && b["stream_options"].is_object() &&
                             b["stream_options"].contains("include_usage") &&
                             b["stream_options"]["include_usage"] == true;
  auto started = deps_.runs->submit(std::move(run), deps_.runs->config().if_busy);
  if (!started) return HttpReply::error(started.error());
  const std::string id = "chatcmpl-" + (*started)->id;
  const std::string model = b["model"].get<std::string>();
  const std::time_t created = std::time(nullptr);
  HttpReply reply;
  if (stream) {
    reply.stream = *started;
    reply.stream_head =
        data_line(chunk(id, model, created, {{"role", "assistant"}, {"content", ""}}, nullptr));
    reply.render_event = [id, model, created, include_usage](const RunEvent& e) -> std::string {
      if (e.name == "text_delta")
        return data_line(
            chunk(id, model, created, {{"content", e.data.value("text", "")}}, nullptr));
      if (e.name == "error") {
        return data_line({{"error",
                           {{"message", e.data.value("message", "")},
                            {"type", "server_error"},
                            {"code", e.data.value("code", "run_failed")}}}});
      }
      if (e.name != "run_end") return {};
      std::string out = data_line(chunk(id, model, created, Json::object(), finish_reason(e.data)));
      if (include_usage) {
        Json usage_chunk{{"id", id},
                         {"object", "chat.completion.chunk"},
                         {"created", created},
                         {"model", model},
                         {"choices", Json::array()},
                         {"usage", openai_usage(e.data.value("usage", Json::object()))}};
        out += data_line(usage_chunk);
      }
      return out;
    };
    reply.stream_tail = "data: [DONE]\n\n";
    return reply;
  }
  reply.wait = *started;
  reply.complete = [id, model, created](const RunState& r) {
    Json summary = r.summary();
    if (summary.contains("error")) {
      return HttpReply::json(502, {{"error",
                                    {{"message", summary["error"].value("message", "")},
                                     {"type", "server_error"},
                                     {"code", "run_failed"}}}});
    }
    const Json result = summary.value("result", Json::object());
    return HttpReply::json(
        200,
        {{"id", id},
         {"object", "chat.completion"},
         {"created", created},
         {"model", model},
         {"choices",
          Json::array({{{"index", 0},
                        {"message", {{"role", "assistant"}, {"content", result.value("text", "")}}},
                        {"finish_reason", finish_reason(result)}}})},
         {"usage", openai_usage(result.value("usage", Json::object()))}});
  };
  return reply;
}

HttpReply Api::models() {
  Json data = Json::array();
  const std::time_t created = std::time(nullptr);
  auto add = [&](const std::string& id) {
    data.push_back({{"id", id}, {"object", "model"}, {"created", created}, {"owned_by", "kernex"}});
  };
  add("kernex");
  for (const auto& [name, agent] : deps_.runs->config().agents) add(name);
  for (const auto& info : deps_.runs->kernel().plugins().plugins()) {
    if (info.ok() && info.kind == PluginKind::Provider) add(info.name);
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
