// The request side every network provider shares: the JSON POST, the buffered call, and the
// fields OpenAI's chat API and its followers (Ollama) spell alike.
#pragma once

#include <memory>
#include <string>
#include <string_view>
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
// function_tools(tools) as JSON text, from a cache of the last toolsets this plugin serialized: a
// server's runs offer the same tools call after call, and building and dumping their schemas
// afresh was a tenth of a run's start. A hit costs one comparison of the specs.
std::shared_ptr<const std::string> function_tools_text(const std::vector<ToolSpec>& tools);
// Adds `"key": value` (value already JSON text) as the last member of the JSON object in
// `object_text` (a dumped Json object, so it ends with '}').
void append_member(std::string& object_text, std::string_view key, std::string_view value);

// A chat messages list that starts with the system prompt (its cache marker removed), if any.
Json system_first(const Context& context);

// temperature, top_p, stop, seed, presence_penalty and frequency_penalty of the call's
// generation, as OpenAI names them, into `out` (the request body, or Ollama's options).
void sampling_fields(const Generation& g, Json& out);

}  // namespace kernex::providers
