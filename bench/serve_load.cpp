// The load client: Beast over one io_context run on the caller's thread. SSE bodies are read with
// a buffer_body parser and async_read_some, so each event is seen when it arrives, not when a
// buffer fills.
#include "serve_load.hpp"

#include <memory>
#include <optional>

#include "beast_names.hpp"
#include "kernex/json.hpp"
#include "openai_chunk.hpp"

namespace kernex::bench {

using Clock = std::chrono::steady_clock;

namespace {

tcp::endpoint loopback(unsigned short port) { return {asio::ip::make_address("127.0.0.1"), port}; }

http::request<http::string_body> make_request(const std::string& method, const std::string& target,
                                              std::string body, unsigned short port, bool sse) {
  http::request<http::string_body> req(http::string_to_verb(method), target, 11);
  req.set(http::field::host, "127.0.0.1:" + std::to_string(port));
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  if (sse) req.set(http::field::accept, "text/event-stream");
  req.keep_alive(true);
  req.body() = std::move(body);
  req.prepare_payload();
  return req;
}

std::string json_field(const std::string& data, const char* key) {
  const Json j = Json::parse(data, nullptr, false);
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>()
                                                                : std::string();
}

class StreamConn : public std::enable_shared_from_this<StreamConn> {
 public:
  StreamConn(asio::io_context& ioc, unsigned short port, SseStream& s, const SseHandler& handler,
             std::function<void()> on_done)
      : socket_(ioc), port_(port), s_(s), handler_(handler), on_done_(std::move(on_done)) {}

  void start() {
    socket_.async_connect(loopback(port_), [self = shared_from_this()](beast::error_code ec) {
      if (ec) return self->finish("connect: " + ec.message());
      self->socket_.set_option(tcp::no_delay(true));
      self->write();
    });
  }

  void abort(const std::string& why) { finish(why); }

 private:
  void write() {
    req_ = make_request("POST", s_.target, s_.body, port_, true);
    s_.sent = Clock::now();
    http::async_write(
        socket_, req_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
          if (ec) return self->finish("write: " + ec.message());
          self->parser_.body_limit(boost::none);
          http::async_read_header(self->socket_, self->buffer_, self->parser_,
                                  [self](beast::error_code ec, std::size_t) {
                                    if (ec) return self->finish("read header: " + ec.message());
                                    self->s_.status =
                                        static_cast<int>(self->parser_.get().result_int());
                                    self->read_body();
                                  });
        });
  }

  void read_body() {
    parser_.get().body().data = chunk_;
    parser_.get().body().size = sizeof chunk_;
    http::async_read_some(
        socket_, buffer_, parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
          if (ec == http::error::need_buffer) ec = {};
          const std::size_t got = sizeof self->chunk_ - self->parser_.get().body().size;
          self->take(std::string_view(self->chunk_, got));
          if (self->done_) return;
          if (ec) return self->finish("read: " + ec.message());
          if (self->parser_.is_done()) return self->finish("the stream ended before run_end");
          self->read_body();
        });
  }

  // Body bytes: SSE events on a 200, the error body otherwise.
  void take(std::string_view bytes) {
    if (s_.status != 200) {
      s_.error.append(bytes);
      return;
    }
    for (char c : bytes) {
      if (c != '\r') pending_.push_back(c);
    }
    for (std::size_t end; !done_ && (end = pending_.find("\n\n")) != std::string::npos;) {
      event(pending_.substr(0, end));
      pending_.erase(0, end + 2);
    }
  }

  void event(const std::string& block) {
    std::string name = "message", data;
    std::size_t pos = 0;
    while (pos <= block.size()) {
      std::size_t nl = block.find('\n', pos);
      if (nl == std::string::npos) nl = block.size();
      const std::string line = block.substr(pos, nl - pos);
      pos = nl + 1;
      auto value = [&](std::size_t n) {
        return line.substr(line.size() > n && line[n] == ' ' ? n + 1 : n);
      };
      if (line.rfind("event:", 0) == 0) name = value(6);
      if (line.rfind("data:", 0) == 0) data += (data.empty() ? "" : "\n") + value(5);
    }
    if (data.empty()) return;  // comments (heartbeats) and id-only blocks
    const auto now = Clock::now();
    if (name == "run_start") s_.run_id = json_field(data, "run_id");
    if (!s_.got_text &&
        (name == "text_delta" || (name == "message" && !chunk_content(data).empty()))) {
      s_.got_text = true;
      s_.first_text = now;
    }
    if (handler_) handler_(s_, name, data);
    if (name == "message" && data == "[DONE]") {  // an OpenAI-format stream (chat completions)
      s_.got_end = true;
      s_.outcome = "done";
      s_.ended = now;
      finish({});
    } else if (name == "run_end") {
      s_.got_end = true;
      s_.outcome = json_field(data, "outcome");
      s_.ended = now;
      finish({});
    } else if (name == "error") {
      s_.ended = now;
      finish("error event: " + data);
    }
  }

  void finish(const std::string& error) {
    if (done_) return;
    done_ = true;
    if (!error.empty() && s_.error.empty()) s_.error = error;
    if (s_.status != 0 && s_.status != 200 && s_.error.empty())
      s_.error = "HTTP " + std::to_string(s_.status);
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    on_done_();
  }

  tcp::socket socket_;
  unsigned short port_;
  SseStream& s_;
  const SseHandler& handler_;
  std::function<void()> on_done_;
  http::request<http::string_body> req_;
  beast::flat_buffer buffer_;
  http::response_parser<http::buffer_body> parser_;
  char chunk_[8192];
  std::string pending_;
  bool done_ = false;
};

class HammerConn : public std::enable_shared_from_this<HammerConn> {
 public:
  using Make = std::function<std::pair<std::string, std::string>(std::size_t)>;
  HammerConn(asio::io_context& ioc, unsigned short port, const Make& make, std::size_t& counter,
             HammerResult& result, Clock::time_point deadline)
      : ioc_(ioc),
        socket_(ioc),
        port_(port),
        make_(make),
        counter_(counter),
        r_(result),
        deadline_(deadline) {}

  void connect() {
    socket_ = tcp::socket(ioc_);
    socket_.async_connect(loopback(port_), [self = shared_from_this()](beast::error_code ec) {
      if (ec) return self->fail("connect: " + ec.message(), false);
      self->socket_.set_option(tcp::no_delay(true));
      self->next();
    });
  }

 private:
  void next() {
    if (Clock::now() >= deadline_) return;
    auto [target, body] = make_(counter_++);
    if (target.empty()) return;  // the caller's requests are all out
    // The method first: the body is moved into the call, and argument order is unspecified.
    const std::string method = body.empty() ? "GET" : "POST";
    req_ = make_request(method, target, std::move(body), port_, false);
    http::async_write(
        socket_, req_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
          if (ec) return self->fail("write: " + ec.message(), true);
          self->res_.emplace();
          self->res_->body_limit(64 << 20);
          http::async_read(
              self->socket_, self->buffer_, *self->res_, [self](beast::error_code ec, std::size_t) {
                if (ec) return self->fail("read: " + ec.message(), true);
                const auto& res = self->res_->get();
                if (res.result_int() != 200) {
                  ++self->r_.failed;
                  if (self->r_.first_failure.empty()) {
                    self->r_.first_failure = "HTTP " + std::to_string(res.result_int()) + ": " +
                                             res.body().substr(0, 300);
                  }
                } else {
                  ++self->r_.ok;
                  self->r_.body_bytes = res.body().size();
                }
                if (!res.keep_alive()) return self->reconnect();
                self->next();
              });
        });
  }

  void fail(const std::string& why, bool retry) {
    ++r_.failed;
    if (r_.first_failure.empty()) r_.first_failure = why;
    if (retry) reconnect();
  }

  void reconnect() {
    beast::error_code ignored;
    socket_.close(ignored);
    buffer_.clear();
    if (Clock::now() < deadline_) connect();
  }

  asio::io_context& ioc_;
  tcp::socket socket_;
  unsigned short port_;
  const Make& make_;
  std::size_t& counter_;
  HammerResult& r_;
  Clock::time_point deadline_;
  http::request<http::string_body> req_;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::string_body>> res_;
};

}  // namespace

LoadClient::LoadClient(unsigned short port) : port_(port) {}
LoadClient::~LoadClient() = default;

void LoadClient::streams(std::vector<SseStream>& streams, std::chrono::seconds timeout,
                         const SseHandler& on_event) {
  asio::io_context ioc;
  asio::steady_timer timer(ioc);
  std::size_t remaining = streams.size();
  std::vector<std::shared_ptr<StreamConn>> conns;
  for (auto& s : streams) {
    conns.push_back(std::make_shared<StreamConn>(ioc, port_, s, on_event, [&] {
      if (--remaining == 0) timer.cancel();
    }));
  }
  timer.expires_after(timeout);
  timer.async_wait([&](beast::error_code ec) {
    if (ec) return;
    for (auto& c : conns) c->abort("timeout");
  });
  for (auto& c : conns) c->start();
  if (streams.empty()) timer.cancel();
  ioc.run();
}

HammerResult LoadClient::hammer(
    int connections, std::chrono::milliseconds duration,
    const std::function<std::pair<std::string, std::string>(std::size_t)>& make) {
  asio::io_context ioc;
  HammerResult result;
  std::size_t counter = 0;
  const auto start = Clock::now();
  for (int i = 0; i < connections; ++i) {
    std::make_shared<HammerConn>(ioc, port_, make, counter, result, start + duration)->connect();
  }
  ioc.run();
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

LoadClient::Reply LoadClient::request(const std::string& method, const std::string& target,
                                      const std::string& body) {
  asio::io_context ioc;
  tcp::socket socket(ioc);
  beast::error_code ec;
  socket.connect(loopback(port_), ec);
  if (ec) return {0, "connect: " + ec.message()};
  auto req = make_request(method, target, body, port_, false);
  http::write(socket, req, ec);
  if (ec) return {0, "write: " + ec.message()};
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  http::read(socket, buffer, parser, ec);
  if (ec) return {0, "read: " + ec.message()};
  socket.shutdown(tcp::socket::shutdown_both, ec);
  return {static_cast<int>(parser.get().result_int()), parser.get().body()};
}

}  // namespace kernex::bench
