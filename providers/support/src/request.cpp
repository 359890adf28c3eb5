// The request side shared by the network providers (see request.hpp).
#include "kernex/providers/request.hpp"

namespace kernex::providers {

Result<Json> send_buffered(http::Client& client, const http::Request& request,
                           const CommonOptions& options) {
  auto response = client.send(request);
  if (!response) return std::unexpected(transport_error(options, response.error()));
  if (response->status < 200 || response->status >= 300)
    return std::unexpected(http_error(options, *response));
  return parse_body(options, response->body);
}

http::Request json_request(const Context& context, std::string url) {
  http::Request request;
  request.stop = context.stop;  // the host cancelling the run aborts the request
  request.url = std::move(url);
  request.headers = json_headers();
  return request;
}

Json function_tools(const std::vector<ToolSpec>& tools) {
  Json defs = Json::array();
  for (const ToolSpec& t : tools) {
    defs.push_back(
        {{"type", "function"},
         {"function",
          {{"name", t.name}, {"description", t.description}, {"parameters", t.parameters}}}});
  }
  return defs;
}

Json system_first(const Context& context) {
  Json messages = Json::array();
  const std::string system = strip_cache_boundary(context.system_prompt);
  if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  return messages;
}

void sampling_fields(const Generation& g, Json& out) {
  if (g.temperature) out["temperature"] = *g.temperature;
  if (g.top_p) out["top_p"] = *g.top_p;
  if (!g.stop.empty()) out["stop"] = g.stop;
  if (g.seed) out["seed"] = *g.seed;
  if (g.presence_penalty) out["presence_penalty"] = *g.presence_penalty;
  if (g.frequency_penalty) out["frequency_penalty"] = *g.frequency_penalty;
}

}  // namespace kernex::providers
