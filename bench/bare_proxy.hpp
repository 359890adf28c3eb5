// The floor of a streaming burst: a bare Boost.Beast server on loopback doing only what any server
// that forwards a chat message to a model must do, with none of kernex's (no storage, no memory,
// no context build, no tools, no records). For each POST {"message", "stream": true} it
//   1. parses the body,
//   2. builds the model request: `upstream_body` (a request kernex sent, so the same bytes and
//      tool schemas) with its last user message replaced by this one,
//   3. connects to the model, sends it, reads its chat.completion.chunk stream,
//   4. relays each chunk's content as an SSE `text_delta` event, and `run_end` at `data: [DONE]`.
// With a BareRunStorage (bare_run_storage.hpp) it is the durable floor: before the model call,
// the context build's reads and the run's row queued for the next batched commit; the head (with
// a run_start event) leaves once the row is on disk.
// What a burst through it costs is what the target is measured against: the harness's own work
// (the client, the fake LLM reading kernex-sized requests) plus a minimal server's. Beast stays in
// bare_proxy.cpp.
#pragma once

#include <memory>
#include <string>

namespace kernex::bench {

class BareRunStorage;

class BareProxy {
 public:
  BareProxy(unsigned short model_port, const std::string& upstream_body, int threads,
            BareRunStorage* storage = nullptr);
  ~BareProxy();
  BareProxy(const BareProxy&) = delete;
  BareProxy& operator=(const BareProxy&) = delete;

  unsigned short port() const;

  struct Impl;  // named by the sessions in bare_proxy.cpp

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kernex::bench
