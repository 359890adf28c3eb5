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

// Built field by field: an initializer list copies each tool's schema twice (into the list, then
// out of it), and this runs for every model call of every run.
Json function_tools(const std::vector<ToolSpec>& tools) {
  Json defs = Json::array();
  defs.get_ref<Json::array_t&>().reserve(tools.size());
  for (const ToolSpec& t : tools) {
    Json function = Json::object();
    function["name"] = t.name;
    function["description"] = t.description;
    function["parameters"] = t.parameters;
    Json def = Json::object();
    def["type"] = "function";
    def["function"] = std::move(function);
    defs.push_back(std::move(def));
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
