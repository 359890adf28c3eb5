// The request side every network provider shares: the JSON POST, the buffered call, and the
// fields OpenAI's chat API and its followers (Ollama) spell alike.
#pragma once

#include <string>
#include <vector>

#include "kernex/providers/support.hpp"

namespace kernex::providers {

// The buffered call: the 2xx body as a JSON object, or the transport, status or body error.
Result<Json> send_buffered(http::Client& client, const http::Request& request,
                           const CommonOptions& options);

// A JSON POST to `url` that the host's stop flag cancels.
http::Request json_request(const Context& context, std::string url);

// Tool definitions as OpenAI's chat API and Ollama take them:
// [{type: function, function: {name, description, parameters}}].
Json function_tools(const std::vector<ToolSpec>& tools);

// A chat messages list that starts with the system prompt (its cache marker removed), if any.
Json system_first(const Context& context);

// temperature, top_p, stop, seed, presence_penalty and frequency_penalty of the call's
// generation, as OpenAI names them, into `out` (the request body, or Ollama's options).
void sampling_fields(const Generation& g, Json& out);

}  // namespace kernex::providers
