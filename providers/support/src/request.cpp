// The request side shared by the network providers (see request.hpp).
#include "kernex/providers/request.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <mutex>

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

namespace {

// Json's == calls 200 and 200.0 (and 0.0 and -0.0) equal, but they dump differently: one caller's
// schema must not decide how another's numbers are sent, so types and float bits must match too.
bool same_text(const Json& a, const Json& b) {
  if (a.type() != b.type()) return false;
  if (a.is_number_float())
    return std::bit_cast<std::uint64_t>(a.get<double>()) ==
           std::bit_cast<std::uint64_t>(b.get<double>());
  if (a.is_array()) return std::equal(a.begin(), a.end(), b.begin(), b.end(), same_text);
  if (a.is_object()) {
    return a.size() == b.size() && std::equal(a.items().begin(), a.items().end(), b.items().begin(),
                                              [](const auto& x, const auto& y) {
                                                return x.key() == y.key() &&
                                                       same_text(x.value(), y.value());
                                              });
  }
  return a == b;
}

// What the text holds: the specs' fields function_tools reads (search hints are not sent).
bool same_tools(const std::vector<ToolSpec>& a, const std::vector<ToolSpec>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
    return x.name == y.name && x.description == y.description &&
           same_text(x.parameters, y.parameters);
  });
}

// A few toolsets and their text, most recent first. Entries are immutable once made: a lookup
// copies the list's pointers under the lock and compares outside it.
class ToolsTextCache {
 public:
  std::shared_ptr<const std::string> text(const std::vector<ToolSpec>& tools) {
    for (const auto& e : snapshot())
      if (same_tools(e->tools, tools)) return {e, &e->text};
    auto made = std::make_shared<Entry>(Entry{tools, dump_tools(tools)});
    std::lock_guard lock(mutex_);
    entries_.insert(entries_.begin(), made);
    if (entries_.size() > kEntries) entries_.pop_back();
    return {made, &made->text};
  }

 private:
  struct Entry {
    std::vector<ToolSpec> tools;
    std::string text;
  };
  static constexpr std::size_t kEntries = 8;  // toolsets in use at once: agents, skill sets
  static std::string dump_tools(const std::vector<ToolSpec>& tools) {
    return function_tools(tools).dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  std::vector<std::shared_ptr<const Entry>> snapshot() {
    std::lock_guard lock(mutex_);
    return entries_;
  }
  std::mutex mutex_;
  std::vector<std::shared_ptr<const Entry>> entries_;
};

}  // namespace

std::shared_ptr<const std::string> function_tools_text(const std::vector<ToolSpec>& tools) {
  static ToolsTextCache cache;
  return cache.text(tools);
}

void append_member(std::string& object_text, std::string_view key, std::string_view value) {
  if (object_text.empty() || object_text.back() != '}') return;  // not a dumped object
  object_text.pop_back();
  object_text.reserve(object_text.size() + key.size() + value.size() + 8);  // one allocation
  if (object_text.size() > 1) object_text += ',';
  object_text += Json(std::string(key)).dump();
  object_text += ':';
  object_text += value;
  object_text += '}';
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
