// One Relay per client connection, its steps chained in order on the connection's strand:
//   read the request -> build the model's -> connect, send, read the model's header -> send the
//   client the SSE header -> (read a piece of the model's stream -> send its events) until [DONE].
// One request per connection, as a burst of new sessions makes them.
#include "bare_proxy.hpp"

#include <cstdio>
#include <optional>
#include <random>
#include <string_view>
#include <thread>
#include <vector>

#include "bare_run_storage.hpp"
#include "beast_names.hpp"
#include "kernex/json.hpp"
#include "loopback_server.hpp"
#include "openai_chunk.hpp"

namespace kernex::bench {

using kernex::Json;

struct BareProxy::Impl {
  // The model request around its last user message's content (a JSON string): each call sends
  // before + the message + after, the least work that builds those bytes.
  std::string before, after;
  tcp::endpoint model;
  BareRunStorage* storage = nullptr;  // the durable floor's (null: relaying only)
  LoopbackServer server;              // last: its connections read the members above
};

namespace {

// The content of the request's last user message becomes `message`.
void set_last_user_message(Json& request, const std::string& message) {
  Json& messages = request["messages"];
  for (auto it = messages.rbegin(); it != messages.rend(); ++it) {
    if (it->is_object() && it->value("role", "") == "user") {
      (*it)["content"] = message;
      return;
    }
  }
  messages.push_back({{"role", "user"}, {"content", message}});
}

class Relay : public std::enable_shared_from_this<Relay> {
 public:
  Relay(BareProxy::Impl& proxy, tcp::socket client)
      : proxy_(proxy), client_(std::move(client)), model_(client_.get_executor()) {}

  void start() {
    http::async_read(client_, client_buffer_, request_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       if (!ec) self->call_model();
                     });
  }

 private:
  void call_model() {
    const Json body = Json::parse(request_.body(), nullptr, false);
    if (!body.is_object() || !body.contains("message") || !body["message"].is_string())
      return fail("400 Bad Request", "expected {\"message\": string}");
    if (proxy_.storage != nullptr) record_run();
    model_request_ = {http::verb::post, "/v1/chat/completions", 11};
    model_request_.set(http::field::host, "127.0.0.1");
    model_request_.set(http::field::content_type, "application/json");
    model_request_.body() = proxy_.before + body["message"].dump() + proxy_.after;
    model_request_.prepare_payload();
    model_.async_connect(proxy_.model, [self = shared_from_this()](beast::error_code ec) {
      if (ec) return self->fail("502 Bad Gateway", "connect: " + ec.message());
      self->model_.set_option(tcp::no_delay(true));
      self->send_model_request();
    });
  }

  void send_model_request() {
    http::async_write(
        model_, model_request_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
          if (ec) return self->fail("502 Bad Gateway", "write: " + ec.message());
          self->model_reply_.body_limit(boost::none);
          http::async_read_header(self->model_, self->model_buffer_, self->model_reply_,
                                  [self](beast::error_code ec, std::size_t) {
                                    if (ec || self->model_reply_.get().result_int() != 200)
                                      return self->fail("502 Bad Gateway", "the model's reply");
                                    self->model_ready_ = true;
                                    self->send_sse_header();
                                  });
        });
  }

  // The durable floor: the context build's reads, then the run's row queued; its commit lets the
  // head go (a run is acknowledged once recorded, as kernex's are).
  void record_run() {
    const std::string target(request_.target());
    const std::size_t from = std::string_view("/v1/sessions/").size();
    const std::string session = target.starts_with("/v1/sessions/")
                                    ? target.substr(from, target.find('/', from) - from)
                                    : target;
    proxy_.storage->context_build(session);
    thread_local std::mt19937_64 bits{std::random_device{}()};
    char id[40];
    std::snprintf(id, sizeof id, "run-%016llx%016llx", static_cast<unsigned long long>(bits()),
                  static_cast<unsigned long long>(bits()));
    run_start_ = "event: run_start\ndata: " +
                 Json{{"run_id", std::string(id)}, {"session_id", session}}.dump() + "\n\n";
    committed_ = false;
    proxy_.storage->record(id, session,
                           [self = shared_from_this(), strand = client_.get_executor()] {
                             asio::post(strand, [self] {
                               self->committed_ = true;
                               self->send_sse_header();
                             });
                           });
  }

  // Once the model answered (and, durable, the run's row is committed): the head, with the
  // durable floor's run_start in the same write.
  void send_sse_header() {
    if (!model_ready_ || !committed_) return;
    out_ =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        "Transfer-Encoding: chunked\r\n\r\n";
    if (!run_start_.empty()) out_ += http_chunk(run_start_);
    write_out([](Relay& r) { r.read_model(); });
  }

  void read_model() {
    model_reply_.get().body().data = piece_;
    model_reply_.get().body().size = sizeof piece_;
    http::async_read_some(
        model_, model_buffer_, model_reply_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) {
          if (ec == http::error::need_buffer) ec = {};
          const std::size_t got = sizeof self->piece_ - self->model_reply_.get().body().size;
          std::string events = self->events_of(std::string_view(self->piece_, got));
          if (!self->done_ && (ec || self->model_reply_.is_done())) {
            events += "event: error\ndata: {\"message\":\"the model's stream broke off\"}\n\n";
            self->done_ = true;
          }
          if (events.empty()) return self->read_model();
          self->out_ = http_chunk(events);
          if (self->done_) self->out_ += "0\r\n\r\n";
          self->write_out([](Relay& r) {
            if (!r.done_) return r.read_model();
            r.close();
          });
        });
  }

  // The SSE events for the complete `data:` lines in `bytes` (and those kept from before).
  std::string events_of(std::string_view bytes) {
    for (char c : bytes)
      if (c != '\r') pending_.push_back(c);
    std::string events;
    std::size_t start = 0;
    for (std::size_t end; !done_ && (end = pending_.find('\n', start)) != std::string::npos;
         start = end + 1) {
      const std::string_view line(pending_.data() + start, end - start);
      if (!line.starts_with("data:")) continue;
      std::string_view data = line.substr(5);
      if (data.starts_with(' ')) data.remove_prefix(1);
      if (data == "[DONE]") {
        events += "event: run_end\ndata: {\"outcome\":\"end_turn\"}\n\n";
        done_ = true;
      } else if (const std::string text = chunk_content(data); !text.empty()) {
        events += "event: text_delta\ndata: " + Json{{"text", text}}.dump() + "\n\n";
      }
    }
    pending_.erase(0, start);
    return events;
  }

  static std::string http_chunk(const std::string& data) {
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    return size + data + "\r\n";
  }

  template <typename Then>
  void write_out(Then then) {
    asio::async_write(client_, asio::buffer(out_),
                      [self = shared_from_this(), then](beast::error_code ec, std::size_t) {
                        if (!ec) then(*self);
                      });
  }

  void fail(const char* status, const std::string& why) {
    const std::string body = Json{{"error", why}}.dump();
    out_ = std::string("HTTP/1.1 ") + status +
           "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
    done_ = true;
    write_out([](Relay& r) { r.close(); });
  }

  void close() {
    beast::error_code ignored;
    client_.shutdown(tcp::socket::shutdown_send, ignored);
    model_.close(ignored);
  }

  BareProxy::Impl& proxy_;
  tcp::socket client_;
  tcp::socket model_;
  beast::flat_buffer client_buffer_, model_buffer_;
  http::request<http::string_body> request_;
  http::request<http::string_body> model_request_;
  http::response_parser<http::buffer_body> model_reply_;
  char piece_[8192];
  std::string pending_, out_, run_start_;
  bool done_ = false, model_ready_ = false, committed_ = true;
};

}  // namespace

BareProxy::BareProxy(unsigned short model_port, const std::string& upstream_body, int threads,
                     BareRunStorage* storage)
    : impl_(std::make_unique<Impl>()) {
  impl_->storage = storage;
  Json upstream = Json::parse(upstream_body, nullptr, false);
  if (!upstream.is_object()) upstream = {{"model", "fake"}};
  upstream["stream"] = true;
  if (!upstream.contains("messages") || !upstream["messages"].is_array())
    upstream["messages"] = Json::array();
  const std::string mark = "\x01the message\x01";
  set_last_user_message(upstream, mark);
  const std::string text = upstream.dump(), quoted = Json(mark).dump();
  const std::size_t at = text.find(quoted);
  impl_->before = text.substr(0, at);
  impl_->after = text.substr(at + quoted.size());
  impl_->model = {asio::ip::make_address("127.0.0.1"), model_port};
  impl_->server.start(
      [this](tcp::socket socket) { std::make_shared<Relay>(*impl_, std::move(socket))->start(); },
      threads);
}

BareProxy::~BareProxy() = default;

unsigned short BareProxy::port() const { return impl_->server.port(); }

}  // namespace kernex::bench
