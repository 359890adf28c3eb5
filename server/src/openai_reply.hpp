// What a finished (or streaming) run looks like to an OpenAI Chat Completions client: the
// message with its tool_calls, an honest finish_reason and the run's real usage.
#pragma once

#include <ctime>
#include <string>

#include "kernex/json.hpp"

namespace kernex::server {

// The run's outcome as OpenAI names why generation stopped: end_turn -> "stop",
// client_tool_calls -> "tool_calls", cancelled -> "cancelled" (never "length": nothing was cut
// by a limit), max_turns and budget_exhausted:* -> "length".
std::string finish_reason(const Json& result);
// {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details.cached_tokens} of the
// run's usage; prompt_tokens counts cached input too, as OpenAI's does.
Json openai_usage(const Json& usage);
// The client tool calls of a result (outcome client_tool_calls) as OpenAI's `tool_calls`.
Json openai_tool_calls(const Json& result);
// The assistant message of a finished run: content (null when it only calls tools), tool_calls.
Json openai_message(const Json& result);

struct ChunkHead {
  std::string id;
  std::string model;
  std::time_t created = 0;
};
// One chat.completion.chunk with a single choice.
Json chunk(const ChunkHead& head, Json delta, const Json& finish_reason);
// "data: JSON\n\n".
std::string data_line(const Json& j);
// The chunks that end a stream: the client's tool calls as deltas (one per call, with its index,
// id, name and arguments), the finish chunk, and the usage chunk when asked for.
std::string final_chunks(const ChunkHead& head, const Json& result, bool include_usage);

}  // namespace kernex::server
