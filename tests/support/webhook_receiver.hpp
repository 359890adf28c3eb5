// A loopback webhook receiver for tests and benches: checks every delivery's signature the way a
// real receiver would (HMAC-SHA256 of "t.body" recomputed here with OpenSSL, t fresh), answers
// with the status a policy picks, and keeps what was accepted per event id so a caller can wait
// (on a condition variable) for N distinct events and count duplicates.
//
//   WebhookReceiver r("secret");
//   r.up();   ... r.url() ...   r.down();  (connection refused on the same port)  r.up();
//   r.wait_distinct(10, 30s);
#pragma once

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fake_http_server.hpp"

namespace kernex::test {

class WebhookReceiver {
 public:
  struct Delivery {
    std::string event_id, type, body;
    bool signature_valid = false;
  };
  // Status for a request, given how many times this event id was seen before (0 = first time).
  using Policy = std::function<int(const FakeHttpServer::Recorded&, int seen_before)>;

  explicit WebhookReceiver(std::string secret) : secret_(std::move(secret)) {}

  static std::string sign(const std::string& secret, const std::string& t,
                          const std::string& body) {
    const std::string message = t + "." + body;
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
         reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &size);
    std::string hex;
    char byte[3];
    for (unsigned int i = 0; i < size; ++i) {
      std::snprintf(byte, sizeof byte, "%02x", mac[i]);
      hex += byte;
    }
    return hex;
  }

  // "t=<t>,v1=<hex>" with the HMAC right and t within `tolerance` of now.
  bool valid(const std::string& header, const std::string& body,
             std::chrono::seconds tolerance = std::chrono::seconds(300)) const {
    const auto comma = header.find(",v1=");
    if (header.rfind("t=", 0) != 0 || comma == std::string::npos) return false;
    const std::string t = header.substr(2, comma - 2);
    char* end = nullptr;
    const long long when = std::strtoll(t.c_str(), &end, 10);
    if (t.empty() || *end != '\0') return false;
    if (std::llabs(static_cast<long long>(std::time(nullptr)) - when) > tolerance.count())
      return false;
    return header.substr(comma + 4) == sign(secret_, t, body);
  }

  void set_policy(Policy policy) {
    std::lock_guard lock(mutex_);
    policy_ = std::move(policy);
  }

  // Listens (again) on the same port once one was chosen.
  void up() {
    server_.reset();
    server_ = std::make_unique<FakeHttpServer>(port_);
    port_ = server_->port();
    server_->set_responder([this](const FakeHttpServer::Recorded& r) { return answer(r); });
  }
  void down() { server_.reset(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/hook"; }

  bool wait_distinct(std::size_t n, std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, limit, [&] { return accepted_.size() >= n; });
  }
  // Waits until `n` requests arrived, answered with any status.
  bool wait_requests(std::size_t n, std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, limit, [&] { return requests_ >= n; });
  }
  // Accepted deliveries (2xx answered), in arrival order.
  std::vector<Delivery> accepted() const {
    std::lock_guard lock(mutex_);
    return order_;
  }
  std::size_t distinct() const {
    std::lock_guard lock(mutex_);
    return accepted_.size();
  }
  std::size_t requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  std::size_t invalid_signatures() const {
    std::lock_guard lock(mutex_);
    return invalid_;
  }
  // Requests for event ids that were already accepted (a receiver would drop them by id).
  std::size_t duplicates() const {
    std::lock_guard lock(mutex_);
    return order_.size() - accepted_.size();
  }

 private:
  FakeHttpServer::Reply answer(const FakeHttpServer::Recorded& r) {
    int status;
    {
      std::lock_guard lock(mutex_);
      ++requests_;
      const std::string id = r.header("x-kernex-event-id");
      const int seen = seen_[id]++;
      status = policy_ ? policy_(r, seen) : 200;
      const bool ok = valid(r.header("x-kernex-signature"), r.body);
      if (!ok) ++invalid_;
      if (status / 100 == 2) {
        order_.push_back({id, r.header("x-kernex-event-type"), r.body, ok});
        accepted_[id]++;
      }
    }
    changed_.notify_all();
    return FakeHttpServer::json(status, "{}");
  }

  std::string secret_;
  int port_ = 0;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  Policy policy_;
  std::map<std::string, int> seen_;
  std::map<std::string, int> accepted_;
  std::vector<Delivery> order_;
  std::size_t requests_ = 0, invalid_ = 0;
  std::unique_ptr<FakeHttpServer> server_;  // last: destroyed first, while the rest is alive
};

}  // namespace kernex::test
