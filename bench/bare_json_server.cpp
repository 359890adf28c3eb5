// A session per connection: read a request, write the prepared response, read the next.
#include "bare_json_server.hpp"
#include "loopback_server.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <optional>
#include <thread>
#include <vector>

namespace kernex::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct BareJsonServer::Impl {
  std::string body;
  LoopbackServer server;  // last: its connections read `body`
};

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(const std::string& body, tcp::socket socket) : body_(body), socket_(std::move(socket)) {}

  void read() {
    parser_.emplace();
    parser_->body_limit(16 << 20);
    http::async_read(socket_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       if (!ec) self->write();
                     });
  }

 private:
  void write() {
    const bool keep_alive = parser_->get().keep_alive();
    res_.emplace(http::status::ok, 11);
    res_->set(http::field::content_type, "application/json");
    res_->keep_alive(keep_alive);
    res_->body() = body_;
    res_->prepare_payload();
    http::async_write(socket_, *res_,
                      [self = shared_from_this(), keep_alive](beast::error_code ec, std::size_t) {
                        if (!ec && keep_alive) self->read();
                      });
  }

  const std::string& body_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::string_body>> res_;
};

}  // namespace

BareJsonServer::BareJsonServer(std::string body, int threads) : impl_(std::make_unique<Impl>()) {
  impl_->body = std::move(body);
  impl_->server.start(
      [this](tcp::socket socket) {
        std::make_shared<Session>(impl_->body, std::move(socket))->read();
      },
      threads);
}

BareJsonServer::~BareJsonServer() = default;

unsigned short BareJsonServer::port() const { return impl_->server.port(); }

}  // namespace kernex::bench
