// One streamed model call, whatever the provider. The driver sends the request, splits the bytes
// into events (SSE) or lines (NDJSON), parses each as a JSON object and hands it to the provider's
// StreamMapping; every way a stream can fail (transport, HTTP status, a malformed or refused
// event, a stream cut short) becomes one typed error that the sink hears before it is returned.
// A provider writes only its event mapping: what an event adds to the response, and when the
// response is complete.
#pragma once

#include <string>
#include <string_view>

#include "kernex/providers/support.hpp"

namespace kernex::providers {

enum class Framing { Sse, Ndjson };

// One event off the wire: the SSE event name ("" without one, and for NDJSON), its data, and the
// data parsed as a JSON object (the mapping may move from it).
struct WireEvent {
  std::string_view name;
  std::string_view data;
  Json json;
};

// How the stream ended, for StreamMapping::finish (the call got a 2xx and no event failed).
struct StreamEnd {
  bool cut = false;        // it stopped inside an SSE event
  bool any_event = false;  // at least one event arrived
  std::string_view raw;    // the body up to the first event (1 MiB at most)
};

class StreamMapping {
 public:
  virtual ~StreamMapping() = default;
  // True once the provider's last event arrived: what follows is not read.
  virtual bool stopped() const { return false; }
  // A payload that is the provider's own non-JSON marker (OpenAI's "[DONE]"): true when taken.
  virtual bool on_marker(std::string_view /*data*/) { return false; }
  // Folds one event into the response under construction; an error ends the stream with it.
  virtual Result<void> on_event(WireEvent& event, const Emitter& emit) = 0;
  // The whole response, or why the stream did not complete it. The driver then emits the usage
  // and done events.
  virtual Result<Response> finish(const StreamEnd& end, const Emitter& emit) = 0;
};

// POSTs `request` (a streaming one) and drives `mapping` with what comes back.
Result<Response> drive_stream(http::Client& client, const http::Request& request,
                              const CommonOptions& options, Framing framing, StreamMapping& mapping,
                              const StreamSink& sink);

// "<name>: malformed stream event from <host>: <what>".
Error malformed_event(const CommonOptions& options, std::string_view what);
// "<name>: the stream from <host> ended before <what>".
Error stream_cut(const CommonOptions& options, std::string_view what);

}  // namespace kernex::providers
