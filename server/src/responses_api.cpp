// POST /v1/responses, GET and DELETE /v1/responses/{id}: OpenAI's Responses API over the same
// runs as Chat Completions (the request parsed into OpenAiRequest, then a run). A response is
// the run's answer as output items (a message, and function_call items for the client's tools);
// streamed as the response.* events; kept per tenant when `store` (the default), so
// previous_response_id continues its conversation.
#include <ctime>

#include "api.hpp"
#include "kernex/log.hpp"
#include "response_store.hpp"
#include "responses_request.hpp"
#include "stored_json.hpp"

namespace kernex::server {
namespace {

ApiError not_found_response(const std::string& id, const std::string& param = "") {
  ApiError e = api_error(param.empty() ? 404 : 400,
                         param.empty() ? "not_found" : "previous_response_not_found",
                         "no response with id '" + id + "'");
  e.param = param;
  return e;
}

// What the client knows of the response before the run ends, and what it comes to.
struct ResponseHead {
  std::string id, model, previous, instructions, user;
  std::time_t created = 0;
  bool store = true;
  Json echo, metadata;
};

Json usage_of(const Json& result) {
  const Json usage = result.value("usage", Json::object());
  const std::uint64_t in = uint_value(usage, "input_tokens");
  const std::uint64_t out = uint_value(usage, "output_tokens");
  return {{"input_tokens", in},
          {"input_tokens_details", {{"cached_tokens", uint_value(usage, "cache_read_tokens")}}},
          {"output_tokens", out},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", in + out}};
}

Json message_item(const std::string& id, const std::string& text, const char* status) {
  return {{"type", "message"},
          {"id", id},
          {"status", status},
          {"role", "assistant"},
          {"content", Json::array({{{"type", "output_text"},
                                    {"text", text},
                                    {"annotations", Json::array()},
                                    {"logprobs", Json::array()}}})}};
}

Json call_item(const Json& call, const char* status) {
  const std::string call_id = call.value("id", "");
  const Json args = call.value("arguments", Json::object());
  return {{"type", "function_call"},
          {"id", "fc_" + call_id},
          {"call_id", call_id},
          {"name", call.value("name", "")},
          {"arguments", args.is_string() ? args.get<std::string>() : stored_text(args)},
          {"status", status}};
}

// The response object: `result` null while in progress; `error` set when the run failed.
Json response_object(const ResponseHead& h, const char* status, Json output, const Json& result,
                     const Json& error) {
  Json r{{"id", h.id},
         {"object", "response"},
         {"created_at", h.created},
         {"status", status},
         {"error", error.is_null()
                       ? Json(nullptr)
                       : Json{{"code", "server_error"}, {"message", error.value("message", "")}}},
         {"incomplete_details", nullptr},
         {"instructions", h.instructions.empty() ? Json(nullptr) : Json(h.instructions)},
         {"max_output_tokens", h.echo.value("max_output_tokens", Json(nullptr))},
         {"model", h.model},
         {"output", std::move(output)},
         {"parallel_tool_calls", h.echo.value("parallel_tool_calls", Json(true))},
         {"previous_response_id", h.previous.empty() ? Json(nullptr) : Json(h.previous)},
         {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
         {"store", h.store},
         {"temperature", h.echo.value("temperature", Json(1.0))},
         {"text", h.echo.value("text", Json{{"format", {{"type", "text"}}}})},
         {"tool_choice", h.echo.value("tool_choice", Json("auto"))},
         {"tools", h.echo.value("tools", Json::array())},
         {"top_p", h.echo.value("top_p", Json(1.0))},
         {"truncation", "disabled"},
         {"usage", result.is_null() ? Json(nullptr) : usage_of(result)},
         {"user", h.user.empty() ? Json(nullptr) : Json(h.user)},
         {"metadata", h.metadata}};
  const std::string outcome = result.is_object() ? result.value("outcome", "") : "";
  if (outcome.starts_with("budget_exhausted") || outcome == "max_turns")
    r["incomplete_details"] = {{"reason", outcome}};
  return r;
}

// The status a finished run gives its response: a limit leaves it incomplete, a cancel
// cancelled, an error failed.
const char* final_status(const Json& result, const Json& error) {
  if (!error.is_null()) return "failed";
  const std::string outcome = result.value("outcome", "end_turn");
  if (outcome == "cancelled") return "cancelled";
  if (outcome.starts_with("budget_exhausted") || outcome == "max_turns") return "incomplete";
  return "completed";
}

// Output items of a finished run: its text as a message (unless it only called client tools),
// then a function_call per client tool call.
Json output_items(const ResponseHead& h, const std::string& text, const Json& result) {
  Json output = Json::array();
  const Json calls = result.value("client_tool_calls", Json::array());
  if (!text.empty() || calls.empty())
    output.push_back(message_item("msg_" + h.id.substr(5), text, "completed"));
  for (const auto& call : calls) output.push_back(call_item(call, "completed"));
  return output;
}

// The conversation a continuation starts from: what the run was given, then its answer.
Json conversation_after(const std::vector<ContextEntry>& given, const std::string& text,
                        const Json& result) {
  Json conversation = given;
  ContextEntry answer = ContextEntry::assistant(text);
  for (const auto& call : result.value("client_tool_calls", Json::array()))
    answer.tool_calls.push_back(call.get<ToolCall>());
  conversation.push_back(answer);
  return conversation;
}

// The response a finished run answers with: `error` set when it failed.
Json finished_response(const ResponseHead& h, const Json& result, const Json& error) {
  Json output = error.is_null() ? output_items(h, result.value("text", ""), result) : Json::array();
  return response_object(h, final_status(result, error), std::move(output),
                         error.is_null() ? result : Json(nullptr), error);
}

std::string response_id(const RunState& run) { return "resp_" + run.id; }

// Kept as the run ends, before anyone hears of the end (RunState::set_before_end), whether or
// not the client still reads: with store: true the response, for GET and previous_response_id;
// a run that stopped on the client's tools is found again by their ids (as for chat completions).
RunState::BeforeEnd keep_response(std::shared_ptr<ResponseStore> store,
                                  std::shared_ptr<ParkedStore> parked, ResponseHead head,
                                  std::string tenant, std::string session,
                                  std::vector<ContextEntry> given) {
  return [store = std::move(store), parked = std::move(parked), head = std::move(head),
          tenant = std::move(tenant), session = std::move(session),
          given = std::move(given)](const RunState& run, RunStatus status, const Json& outcome) {
    const Json error = status == RunStatus::Failed ? outcome : Json(nullptr);
    const Json result = error.is_null() && outcome.is_object() ? outcome : Json::object();
    std::vector<std::string> ids;
    for (const auto& c : result.value("client_tool_calls", Json::array()))
      ids.push_back(c.value("id", ""));
    park_calls(parked.get(), tenant, session, run.id, ids);
    if (!head.store || !store) return;
    ResponseHead h = head;
    h.id = response_id(run);
    StoredResponse row{h.id,
                       tenant,
                       session,
                       finished_response(h, result, error),
                       conversation_after(given, result.value("text", ""), result),
                       run.id};
    if (auto r = store->put(row); !r)
      log(LogLevel::Error, "serve: response " + h.id + " not stored: " + r.error().describe());
  };
}

// Streams a run as the response.* events, each with its sequence_number; the state lives with
// the stream (one reader renders one response).
class ResponseStream {
 public:
  explicit ResponseStream(ResponseHead head) : head_(std::move(head)) {}

  std::string head() {
    Json r = response_object(head_, "in_progress", Json::array(), nullptr, nullptr);
    // One statement per event: the operands of + are evaluated in no set order.
    std::string out = event("response.created", {{"response", r}});
    out += event("response.in_progress", {{"response", r}});
    return out;
  }

  // The server may render an event again (one that did not fit a buffer waits for the next):
  // the state moved on once, so the text is kept for the event that was rendered last.
  std::string render(const RunEvent& e) {
    if (e.id != 0 && e.id == last_id_) return last_text_;
    last_text_ = render_once(e);
    last_id_ = e.id;
    return last_text_;
  }

 private:
  std::string render_once(const RunEvent& e) {
    if (e.name == "text_delta") {
      const std::string delta = e.data.value("text", "");
      if (delta.empty()) return {};
      std::string out = open_message();
      text_ += delta;
      return out + event("response.output_text.delta", {{"item_id", message_id()},
                                                        {"output_index", 0},
                                                        {"content_index", 0},
                                                        {"delta", delta},
                                                        {"logprobs", Json::array()}});
    }
    if (e.name == "error") return end(Json::object(), e.data);
    if (e.name == "run_end") return end(e.data, nullptr);
    return {};
  }

  std::string message_id() const { return "msg_" + head_.id.substr(5); }

  std::string event(const char* type, Json data) {
    data["type"] = type;
    data["sequence_number"] = sequence_++;
    return std::string("event: ") + type + "\ndata: " + stored_text(data) + "\n\n";
  }

  std::string open_message() {
    if (message_open_) return {};
    message_open_ = true;
    Json item = message_item(message_id(), "", "in_progress");
    item["content"] = Json::array();
    std::string out = event("response.output_item.added", {{"output_index", 0}, {"item", item}});
    return out += event(
               "response.content_part.added",
               {{"item_id", message_id()},
                {"output_index", 0},
                {"content_index", 0},
                {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}}}});
  }

  std::string close_message() {
    const Json done = message_item(message_id(), text_, "completed");
    std::string out = event("response.output_text.done", {{"item_id", message_id()},
                                                          {"output_index", 0},
                                                          {"content_index", 0},
                                                          {"text", text_},
                                                          {"logprobs", Json::array()}});
    out += event("response.content_part.done", {{"item_id", message_id()},
                                                {"output_index", 0},
                                                {"content_index", 0},
                                                {"part", done["content"][0]}});
    out += event("response.output_item.done", {{"output_index", 0}, {"item", done}});
    return out;
  }

  std::string calls(const Json& result, std::size_t index) {
    std::string out;
    for (const auto& call : result.value("client_tool_calls", Json::array())) {
      Json item = call_item(call, "in_progress");
      const std::string args = item["arguments"].get<std::string>();
      item["arguments"] = "";
      out += event("response.output_item.added", {{"output_index", index}, {"item", item}});
      out += event("response.function_call_arguments.delta",
                   {{"item_id", item["id"]}, {"output_index", index}, {"delta", args}});
      out += event("response.function_call_arguments.done", {{"item_id", item["id"]},
                                                             {"output_index", index},
                                                             {"name", item["name"]},
                                                             {"arguments", args}});
      item["arguments"] = args;
      item["status"] = "completed";
      out += event("response.output_item.done", {{"output_index", index}, {"item", item}});
      ++index;
    }
    return out;
  }

  std::string end(const Json& result, const Json& error) {
    std::string out;
    const bool has_calls = !result.value("client_tool_calls", Json::array()).empty();
    if (error.is_null() && !message_open_ && !has_calls) out += open_message();
    if (message_open_) out += close_message();
    out += calls(result, message_open_ ? 1 : 0);
    const char* status = final_status(result, error);
    Json output = Json::array();
    if (message_open_) output.push_back(message_item(message_id(), text_, "completed"));
    for (const auto& call : result.value("client_tool_calls", Json::array()))
      output.push_back(call_item(call, "completed"));
    Json r =
        response_object(head_, status, output, error.is_null() ? result : Json(nullptr), error);
    const std::string done = std::string(status) == "completed" ? "response.completed"
                             : std::string(status) == "failed"  ? "response.failed"
                                                                : "response.incomplete";
    return out + event(done.c_str(), {{"response", r}});
  }

  ResponseHead head_;
  std::uint64_t sequence_ = 0;
  std::uint64_t last_id_ = 0;
  std::string last_text_;
  bool message_open_ = false;
  std::string text_;
};

}  // namespace

HttpReply Api::responses(const HttpRequest& req, const std::string& tenant) {
  auto parsed = parse_body(req.body);
  if (!parsed) return HttpReply::error(parsed.error());
  if (!deps_.responses)
    return HttpReply::error(api_error(501, "not_supported", "no response store on this server"));
  auto previous = previous_response_id(*parsed);
  if (!previous) return HttpReply::error(previous.error());
  std::vector<ContextEntry> earlier;
  if (!previous->empty()) {
    auto stored = deps_.responses->get(tenant, *previous);
    if (!stored) return HttpReply::error(api_error(500, "store_failed", stored.error().describe()));
    if (!*stored) return HttpReply::error(not_found_response(*previous, "previous_response_id"));
    if ((*stored)->conversation.is_array()) {
      try {
        earlier = (*stored)->conversation.get<std::vector<ContextEntry>>();
      } catch (const std::exception&) {
        return HttpReply::error(not_found_response(*previous, "previous_response_id"));
      }
    }
  }
  auto request = parse_responses_request(req, *parsed, std::move(earlier));
  if (!request) return HttpReply::error(request.error());
  auto run = openai_run(request->request, tenant);
  if (!run) return HttpReply::error(run.error());
  ResponseHead head{"",
                    request->request.model,
                    request->previous_response_id,
                    request->instructions,
                    request->request.user,
                    std::time(nullptr),
                    request->store,
                    request->echo,
                    request->request.metadata};
  head.echo["parallel_tool_calls"] = request->request.generation.parallel_tool_calls.value_or(true);
  run->before_end = keep_response(deps_.responses, deps_.parked, head, tenant,
                                  request->request.session, request->request.messages);
  auto started = deps_.runs->submit(
      std::move(*run), request->request.if_busy.value_or(deps_.runs->config().if_busy));
  if (!started) return HttpReply::error(started.error());
  head.id = response_id(**started);
  HttpReply reply;
  reply.cancel_on_disconnect = deps_.runs->config().openai.cancel_on_disconnect;
  if (request->request.stream) {
    auto stream = std::make_shared<ResponseStream>(head);
    reply.stream = *started;
    reply.stream_head = stream->head();
    reply.render_event = [stream](const RunEvent& e) { return stream->render(e); };
    return reply;
  }
  reply.wait = *started;
  reply.complete = [head](const RunState& r) {
    const Json summary = r.summary();
    return HttpReply::json(200, finished_response(head, summary.value("result", Json::object()),
                                                  summary.value("error", Json(nullptr))));
  };
  return reply;
}

HttpReply Api::response_by_id(const HttpRequest& req, const std::string& tenant,
                              const std::string& id) {
  if (!deps_.responses) return HttpReply::error(not_found_response(id));
  if (req.method == "DELETE") {
    auto removed = deps_.responses->remove(tenant, id);
    if (!removed)
      return HttpReply::error(api_error(500, "store_failed", removed.error().describe()));
    if (!*removed) return HttpReply::error(not_found_response(id));
    return HttpReply::json(200, {{"id", id}, {"object", "response.deleted"}, {"deleted", true}});
  }
  if (req.method != "GET")
    return HttpReply::error(
        api_error(405, "method_not_allowed", req.method + " is not allowed on " + req.path));
  auto stored = deps_.responses->get(tenant, id);
  if (!stored) return HttpReply::error(api_error(500, "store_failed", stored.error().describe()));
  if (!*stored || !(*stored)->response.is_object()) return HttpReply::error(not_found_response(id));
  return HttpReply::json(200, (*stored)->response);
}

}  // namespace kernex::server
