// An OpenAI-style request, parsed and checked, free of the endpoint it came from: the Chat
// Completions and Responses handlers both turn it into a run. Every field a client sends is
// either carried here or refused with a 400 naming it; nothing is dropped without a word.
#pragma once

#include <expected>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "api_error.hpp"
#include "http_types.hpp"
#include "kernex/context.hpp"
#include "kernex/generation.hpp"
#include "kernex/server/serve_config.hpp"
#include "kernex/tool.hpp"

namespace kernex::server {

struct OpenAiRequest {
  std::string model;
  std::string system;  // system and developer messages, in order, joined by blank lines
  // Every other message, in order, as the kernel keeps them: "user", "assistant" (text and/or
  // tool_calls) and "tool" (one ToolResult each, its name taken from the call it answers).
  std::vector<ContextEntry> messages;
  Generation generation;
  std::vector<ToolSpec> tools;  // the client's function tools, offered beside the agent's own
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // The end user (`user`, else `safety_identifier`): scopes recall and facts within the tenant;
  // never a session key, and never a reason to refuse a concurrent request. Empty: none.
  std::string user;
  // X-Session-Id or metadata.session_id: ties the run to the session's server state. Empty:
  // the request's messages are the whole conversation and nothing outlives the run.
  std::string session;
  std::optional<IfBusy> if_busy;  // X-Kernex-If-Busy; unset: serve.if_busy
  Json metadata = Json::object();

  // Where the conversation stands: the index of the last "user" message. Entries after it are
  // this turn's tool exchange (assistant tool_calls, then the client's tool results).
  std::size_t last_user() const;
  // The last entries are tool results the client sends back for an assistant's tool_calls.
  bool continues_tool_calls() const;
};

// POST /v1/chat/completions: `body` is the parsed JSON object; headers give the session.
std::expected<OpenAiRequest, ApiError> parse_chat_request(const HttpRequest& req, const Json& body);

// The pieces, for the Responses API (its shapes differ in places; each takes both where so).
// `where` is the field's name as the client wrote it, used in errors.
// A sampling field (temperature, top_p, stop, seed, presence/frequency_penalty,
// reasoning_effort) into `g`; false when `key` is none of them.
std::expected<bool, ApiError> parse_sampling_field(const std::string& key, const Json& value,
                                                   Generation& g);
// max_tokens / max_completion_tokens / max_output_tokens: a positive integer (null: unset).
std::expected<std::optional<std::uint64_t>, ApiError> parse_max_tokens(const Json& value,
                                                                       const std::string& where);
// A function definition {name, description?, parameters?, strict?}.
std::expected<ToolSpec, ApiError> parse_function(const Json& fn, const std::string& where);
// Every non-null key of `m` is in `allowed`; else an unsupported-field error at where.key: why.
std::expected<void, ApiError> only_known_keys(const Json& m, const std::set<std::string>& allowed,
                                              const std::string& where, std::string_view why);
// A `tools` list of functions, each offered once: chat's {type: function, function: {...}}
// (`nested`) or the Responses API's {type: function, name, parameters}.
std::expected<void, ApiError> parse_function_tools(const Json& v, OpenAiRequest& out, bool nested);
// {name, schema, strict?, description?}: a json_schema format's body.
std::expected<ResponseFormat, ApiError> parse_json_schema(const Json& v, const std::string& where);
// Chat's response_format: {type: text | json_object | json_schema, json_schema?}.
std::expected<ResponseFormat, ApiError> parse_response_format(const Json& v,
                                                              const std::string& where);
// "auto" | "none" | "required" | {type: function, function: {name}} | {type: function, name}.
std::expected<ToolChoice, ApiError> parse_tool_choice(const Json& v,
                                                      const std::vector<ToolSpec>& tools,
                                                      const std::string& where);
// The body's tool_choice, if present, into out.generation; one that names tools needs some tools.
// Reads out.tools: parse them first.
std::expected<void, ApiError> parse_request_tool_choice(const Json& body, OpenAiRequest& out);
// Session (X-Session-Id, else metadata.session_id), if-busy header, metadata and user.
std::expected<void, ApiError> parse_identity(const HttpRequest& req, const Json& body,
                                             OpenAiRequest& out);
// A message's content: a string, null, or a list of text parts ({type: text|input_text|
// output_text|refusal, text}); any other part is refused by its type.
std::expected<std::string, ApiError> content_text(const Json& content, const std::string& where);

// The 400 every refusal uses: "<field>: <why>", code "invalid_request" or "unsupported_field".
ApiError field_error(const std::string& field, const std::string& why);
ApiError unsupported_field(const std::string& field, const std::string& why);

}  // namespace kernex::server
