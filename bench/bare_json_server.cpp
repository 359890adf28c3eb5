// A session per connection: read a request, write the prepared response, read the next.
#include "bare_json_server.hpp"
#include "loopback_listen.hpp"

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
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  unsigned short port = 0;
  std::vector<std::thread> threads;
  void accept();
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

void BareJsonServer::Impl::accept() {
  acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      socket.set_option(tcp::no_delay(true));
      std::make_shared<Session>(body, std::move(socket))->read();
    }
    accept();
  });
}

BareJsonServer::BareJsonServer(std::string body, int threads) : impl_(std::make_unique<Impl>()) {
  impl_->body = std::move(body);
  impl_->port = listen_on_loopback(impl_->acceptor);
  impl_->accept();
  for (int i = 0; i < std::max(1, threads); ++i)
    impl_->threads.emplace_back([this] { impl_->ioc.run(); });
}

BareJsonServer::~BareJsonServer() {
  impl_->ioc.stop();
  for (auto& t : impl_->threads) t.join();
}

unsigned short BareJsonServer::port() const { return impl_->port; }

}  // namespace kernex::bench
