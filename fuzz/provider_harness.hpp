// Drives one provider plugin, loaded as the kernel loads it, against a loopback server whose
// answer is the fuzz input: the first byte picks a whole JSON body, a stream, an error status or a
// raw response; the rest is the body. Tools are offered so tool-call parsing runs too.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kernex/plugin_host.hpp"
#include "loopback_server.hpp"

namespace kernex::fuzz {

inline int run_provider(const char* plugin, const char* name, const std::string& stream_type,
                        const std::uint8_t* data, std::size_t size) {
  static LoopbackServer server;
  static std::shared_ptr<Provider> provider = [&] {
    static PluginHost host;
    if (!host.add_file(std::string(KERNEX_PLUGIN_BUILD_DIR) + "/" + plugin))
      throw std::runtime_error(std::string("cannot load ") + plugin);
    const Json config{{"base_url", server.url()},
                      {"api_key", "sk-fuzz-0123456789abcdef"},
                      {"model", "m"},
                      {"max_retries", 0},
                      {"timeout_secs", 5},
                      {"read_timeout_secs", 2}};
    auto made = host.create_provider(name, config);
    if (!made) throw std::runtime_error(made.error().describe());
    return *made;
  }();
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const int mode = data[0] % 4;
  switch (mode) {
    case 0:
      server.set_reply(http_reply(200, "application/json", body));
      break;
    case 1:
      server.set_reply(http_reply(200, stream_type, body));
      break;
    case 2:
      server.set_reply(http_reply(400 + data[0] % 200, "application/json", body));
      break;
    default:
      server.set_reply(std::string(body));
      break;
  }
  Context context("fuzz");
  const std::vector<ToolSpec> tools{
      ToolSpec{"calc", "Adds", Json{{"type", "object"}, {"properties", Json::object()}}, {}}};
  StreamSink sink;
  if (mode == 1 || mode == 3) sink = [](const StreamEvent&) {};
  if (auto r = provider->complete(context, tools, sink)) {
    Json back = *r;  // what a provider returns must serialise (trajectories, serve)
    (void)back.dump();
  }
  return 0;
}

}  // namespace kernex::fuzz
