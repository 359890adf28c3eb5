// The baseline for request rates: a bare Boost.Beast HTTP/1.1 server on loopback answering every
// request with one fixed JSON body (keep-alive, asynchronous, on `threads` threads). It reads and
// discards the request body, so a client sends it exactly what it sends a real server.
#pragma once

#include <memory>
#include <string>

namespace kernex::bench {

class BareJsonServer {
 public:
  BareJsonServer(std::string body, int threads);
  ~BareJsonServer();
  BareJsonServer(const BareJsonServer&) = delete;
  BareJsonServer& operator=(const BareJsonServer&) = delete;

  unsigned short port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kernex::bench
