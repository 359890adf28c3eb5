// A fake OpenAI-compatible LLM on loopback for benchmarks (and tests that need a slow, streaming
// model): POST /v1/chat/completions answers
//   stream: true  SSE chat.completion.chunk events: `chunks` content chunks `interval` apart (the
//                 first one `interval` after the request arrived), then a chunk with
//                 finish_reason "stop" and usage, then `data: [DONE]`;
//   otherwise     one chat.completion JSON holding the same text, `whole_delay` after the request.
// Asynchronous (Asio timers on `threads` threads, never a thread per connection), keep-alive, so
// thousands of concurrent calls cost sockets and timers only. Every call is recorded with the
// time its request arrived and its first chunk was written, so a bench can subtract the model's
// own time to first token from what its client saw. Beast stays in fake_llm.cpp.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kernex::bench {

struct FakeLlmOptions {
  int chunks = 20;
  std::chrono::milliseconds interval{100};
  std::string chunk_text = "tok ";  // each content chunk's text
  int threads = 1;
  std::chrono::milliseconds whole_delay{0};  // how long a non-streamed answer waits (0: at once)
};

struct FakeLlmCall {
  std::string last_user_message;  // the key a bench finds its call by
  bool stream = false;
  std::chrono::steady_clock::time_point received;          // request fully read
  std::chrono::steady_clock::time_point first_chunk_sent;  // first content chunk written (stream)
  std::chrono::steady_clock::time_point finished;          // last byte written
};

class FakeLlm {
 public:
  explicit FakeLlm(FakeLlmOptions options = {});
  ~FakeLlm();
  FakeLlm(const FakeLlm&) = delete;
  FakeLlm& operator=(const FakeLlm&) = delete;

  unsigned short port() const;
  std::string base_url() const;  // http://127.0.0.1:PORT/v1

  // Finished calls, in the order they finished.
  std::vector<FakeLlmCall> calls() const;
  // The first finished call whose last user message equals `message`.
  std::optional<FakeLlmCall> call_for(const std::string& message) const;
  std::size_t open_connections() const;
  void clear();
  // The body of the first streamed call received since start (or clear()): what a baseline that
  // stands in for the server sends the model, the same bytes as the server's own requests.
  std::string first_stream_body() const;

  struct Impl;  // named by the connections in fake_llm.cpp

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kernex::bench
