// POST /v1/responses, parsed and checked into the request both OpenAI endpoints share
// (OpenAiRequest): `input` items become the kernel's entries after those of the response named by
// `previous_response_id`, `instructions` the system text, `text.format` the response format.
// Every documented field is honoured or refused with a 400 naming it; unknown fields too.
#pragma once

#include <expected>
#include <string>
#include <vector>

#include "api_error.hpp"
#include "http_types.hpp"
#include "kernex/context.hpp"
#include "openai_request.hpp"

namespace kernex::server {

struct ResponsesRequest {
  OpenAiRequest request;    // messages: the earlier conversation, then this request's input
  std::size_t earlier = 0;  // how many of request.messages came from previous_response_id
  std::string instructions;
  std::string previous_response_id;
  bool store = true;           // OpenAI's default: kept, readable at GET /v1/responses/{id}
  Json echo = Json::object();  // fields the response object repeats (tools, tool_choice, text...)
};

// The previous_response_id of a body (empty when none), read before the rest so its stored
// conversation can be loaded: function_call_output items answer calls made there.
std::expected<std::string, ApiError> previous_response_id(const Json& body);

// `earlier`: the stored conversation of previous_response_id (empty without one).
std::expected<ResponsesRequest, ApiError> parse_responses_request(
    const HttpRequest& req, const Json& body, std::vector<ContextEntry> earlier);

}  // namespace kernex::server
