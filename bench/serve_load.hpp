// The bench's HTTP client (asynchronous, one thread, many connections), for `kernex serve` and the
// bare baseline alike:
//   streams  one connection per SSE request, all opened at once, each read until run_end or error
//            (or, for an OpenAI-format stream, `data: [DONE]`)
//   hammer   keep-alive connections sending requests back to back for a while (requests/s)
//   request  one blocking request
// Beast stays in serve_load.cpp.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace kernex::bench {

struct SseStream {
  std::string target;  // e.g. /v1/sessions/s1/messages
  std::string body;    // JSON
  // Filled in:
  int status = 0;
  std::string error;  // transport failure, a non-200 body, or an `error` event's data
  std::string run_id, outcome;
  bool got_text = false, got_end = false;
  std::chrono::steady_clock::time_point sent, first_text, ended;
};

struct HammerResult {
  std::size_t ok = 0, failed = 0;
  double seconds = 0;
  std::string first_failure;
  std::size_t body_bytes = 0;  // the last good response body's size
};

// Called on the client's thread for each SSE event (name, data) of a stream.
using SseHandler =
    std::function<void(SseStream&, const std::string& event, const std::string& data)>;

class LoadClient {
 public:
  explicit LoadClient(unsigned short port);
  ~LoadClient();
  LoadClient(const LoadClient&) = delete;
  LoadClient& operator=(const LoadClient&) = delete;

  // Returns once every stream ended or `timeout` passed (the rest then fail with "timeout").
  void streams(std::vector<SseStream>& streams, std::chrono::seconds timeout,
               const SseHandler& on_event = {});

  // `make(i)` gives request i's target and body (POST; GET when the body is empty); an empty
  // target ends that connection's requests. Stops issuing at `duration`.
  HammerResult hammer(int connections, std::chrono::milliseconds duration,
                      const std::function<std::pair<std::string, std::string>(std::size_t)>& make);

  struct Reply {
    int status = 0;
    std::string body;
  };
  Reply request(const std::string& method, const std::string& target, const std::string& body = {});

 private:
  unsigned short port_;
};

}  // namespace kernex::bench
