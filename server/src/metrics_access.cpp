// Who may read /metrics: every tenant's usage and cost is in it. Only the operator's scraper,
// by a bearer token of its own (serve.metrics.token_env) or by reaching a listener of its own
// (serve.metrics.listen). The peer's address and forwarding headers (X-Forwarded-For,
// Forwarded, X-Real-IP) are never looked at: behind a proxy on the same host every client is
// loopback, and a client writes whatever headers it likes.
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <array>

#include "api.hpp"

namespace kernex::server {
namespace {

// Compared as digests, in constant time: neither the token's length nor a matching prefix shows
// in the time taken.
bool same_token(std::string_view presented, std::string_view token) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> a{}, b{};
  unsigned int na = 0, nb = 0;
  EVP_Digest(presented.data(), presented.size(), a.data(), &na, EVP_sha256(), nullptr);
  EVP_Digest(token.data(), token.size(), b.data(), &nb, EVP_sha256(), nullptr);
  return na == nb && CRYPTO_memcmp(a.data(), b.data(), na) == 0;
}

}  // namespace

HttpReply metrics_reply(const HttpRequest& req, const std::string& token,
                        const std::function<std::string()>& text) {
  if (req.method != "GET") {
    HttpReply r = HttpReply::error(
        api_error(405, "method_not_allowed", req.method + " is not allowed on " + req.path));
    return r;
  }
  if (!token.empty()) {
    const std::string header = req.header("authorization");
    constexpr std::string_view kBearer = "Bearer ";
    const bool bearer =
        header.size() > kBearer.size() && header.compare(0, kBearer.size(), kBearer) == 0;
    if (!bearer || !same_token(std::string_view(header).substr(kBearer.size()), token)) {
      HttpReply r = HttpReply::error(api_error(
          401, "unauthorized", "/metrics needs Authorization: Bearer <the metrics token>"));
      r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"metrics\"");
      return r;
    }
  }
  HttpReply r;
  r.content_type = "text/plain; version=0.0.4";
  r.body = text();
  return r;
}

HttpReply metrics_listener_reply(const HttpRequest& req, const std::string& token,
                                 const std::function<std::string()>& text) {
  if (req.path != "/metrics")
    return HttpReply::error(
        api_error(404, "not_found", "this listener serves /metrics only (serve.metrics.listen)"));
  return metrics_reply(req, token, text);
}

}  // namespace kernex::server
