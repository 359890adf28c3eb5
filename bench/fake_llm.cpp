// The fake LLM's server: one Connection per accepted socket, reading requests in a keep-alive loop;
// a streamed answer is a chain timer -> write -> timer, each write a hand-made HTTP chunk, so a
// thousand calls in flight are a thousand sockets and timers on one thread.
#include "fake_llm.hpp"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "beast_names.hpp"
#include "chat_request_scan.hpp"
#include "kernex/json.hpp"
#include "loopback_server.hpp"

namespace kernex::bench {

using Clock = std::chrono::steady_clock;
using kernex::Json;

// Members the connections touch come first: the io_context destroys its pending handlers, and with
// them the last connections, while they still exist.
struct FakeLlm::Impl {
  FakeLlmOptions options;
  std::atomic<std::size_t> open{0};
  mutable std::mutex mutex;
  std::vector<FakeLlmCall> calls;
  std::unordered_map<std::string, std::size_t> by_message;
  std::string first_stream_body;  // kept once: a copy per call would cost the harness CPU
  LoopbackServer server;          // last (see above)

  void record(FakeLlmCall call) {
    std::lock_guard lock(mutex);
    by_message.try_emplace(call.last_user_message, calls.size());
    calls.push_back(std::move(call));
  }
};

namespace {

std::string chunk_event(const Json& choice_delta, const Json& finish, const Json* usage) {
  Json chunk = {{"id", "chatcmpl-fake"},
                {"object", "chat.completion.chunk"},
                {"created", 0},
                {"model", "fake"},
                {"choices", {{{"index", 0}, {"delta", choice_delta}, {"finish_reason", finish}}}}};
  if (usage != nullptr) chunk["usage"] = *usage;
  return "data: " + chunk.dump() + "\n\n";
}

// One HTTP/1.1 chunk of the chunked transfer coding.
std::string http_chunk(const std::string& data) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return size + data + "\r\n";
}

const Json kUsage = {{"prompt_tokens", 12}, {"completion_tokens", 20}, {"total_tokens", 32}};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(FakeLlm::Impl& server, tcp::socket socket)
      : server_(server), socket_(std::move(socket)), timer_(socket_.get_executor()) {
    ++server_.open;
  }
  ~Connection() { --server_.open; }

  void read() {
    parser_.emplace();
    parser_->body_limit(16 << 20);
    http::async_read(socket_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       if (!ec) self->answer(self->parser_->release());
                     });
  }

 private:
  void answer(http::request<http::string_body> req) {
    keep_alive_ = req.keep_alive();
    call_ = FakeLlmCall{};
    call_.received = Clock::now();
    auto body = scan_chat_request(req.body());
    if (req.method() != http::verb::post || !req.target().ends_with("/chat/completions") || !body) {
      return write_whole(http::status::bad_request,
                         R"({"error":{"message":"fake LLM: POST /v1/chat/completions only"}})");
    }
    call_.last_user_message = std::move(body->last_user_message);
    call_.stream = body->stream;
    if (call_.stream) {
      std::lock_guard lock(server_.mutex);
      if (server_.first_stream_body.empty()) server_.first_stream_body = req.body();
    }
    if (!call_.stream && server_.options.whole_delay.count() == 0)
      return write_whole(http::status::ok, completion());
    if (!call_.stream) {
      timer_.expires_at(call_.received + server_.options.whole_delay);
      return timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
        if (!ec) self->write_whole(http::status::ok, self->completion());
      });
    }
    out_ =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        "Transfer-Encoding: chunked\r\n\r\n";
    sent_ = 0;
    first_due_ = call_.received + server_.options.interval;
    write_out([](Connection& c) { c.next_chunk(); });
  }

  std::string completion() const {
    std::string text;
    for (int i = 0; i < server_.options.chunks; ++i) text += server_.options.chunk_text;
    Json j = {{"id", "chatcmpl-fake"},
              {"object", "chat.completion"},
              {"created", 0},
              {"model", "fake"},
              {"choices",
               {{{"index", 0},
                 {"message", {{"role", "assistant"}, {"content", text}}},
                 {"finish_reason", "stop"}}}},
              {"usage", kUsage}};
    return j.dump();
  }

  void write_whole(http::status status, std::string body) {
    auto res = std::make_shared<http::response<http::string_body>>(status, 11);
    res->set(http::field::content_type, "application/json");
    res->keep_alive(keep_alive_);
    res->body() = std::move(body);
    res->prepare_payload();
    http::async_write(socket_, *res,
                      [self = shared_from_this(), res](beast::error_code ec, std::size_t) {
                        self->call_.finished = Clock::now();
                        self->server_.record(self->call_);
                        if (!ec && self->keep_alive_) self->read();
                      });
  }

  // Content chunks on a fixed schedule (first_due_ + i * interval, no drift), the last one
  // followed at once by the finishing chunk, [DONE] and the end of the chunked body.
  void next_chunk() {
    timer_.expires_at(first_due_ + sent_ * server_.options.interval);
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec) return;
      Connection& c = *self;
      Json delta = {{"content", c.server_.options.chunk_text}};
      if (c.sent_ == 0) delta["role"] = "assistant";
      std::string events = chunk_event(delta, nullptr, nullptr);
      const bool last = ++c.sent_ == c.server_.options.chunks;
      if (last) events += chunk_event(Json::object(), "stop", &kUsage) + "data: [DONE]\n\n";
      c.out_ = http_chunk(events);
      if (last) c.out_ += "0\r\n\r\n";
      c.write_out([last](Connection& c) {
        if (c.sent_ == 1) c.call_.first_chunk_sent = Clock::now();
        if (!last) return c.next_chunk();
        c.call_.finished = Clock::now();
        c.server_.record(c.call_);
        if (c.keep_alive_) c.read();
      });
    });
  }

  template <typename Then>
  void write_out(Then then) {
    asio::async_write(socket_, asio::buffer(out_),
                      [self = shared_from_this(), then](beast::error_code ec, std::size_t) {
                        if (!ec) then(*self);
                      });
  }

  FakeLlm::Impl& server_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  FakeLlmCall call_;
  bool keep_alive_ = true;
  std::string out_;
  int sent_ = 0;
  Clock::time_point first_due_;
};

}  // namespace

FakeLlm::FakeLlm(FakeLlmOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->server.start(
      [this](tcp::socket socket) {
        std::make_shared<Connection>(*impl_, std::move(socket))->read();
      },
      impl_->options.threads);
}

FakeLlm::~FakeLlm() = default;

unsigned short FakeLlm::port() const { return impl_->server.port(); }

std::string FakeLlm::base_url() const {
  return "http://127.0.0.1:" + std::to_string(port()) + "/v1";
}

std::vector<FakeLlmCall> FakeLlm::calls() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->calls;
}

std::optional<FakeLlmCall> FakeLlm::call_for(const std::string& message) const {
  std::lock_guard lock(impl_->mutex);
  auto it = impl_->by_message.find(message);
  if (it == impl_->by_message.end()) return std::nullopt;
  return impl_->calls[it->second];
}

std::size_t FakeLlm::open_connections() const { return impl_->open.load(); }

void FakeLlm::clear() {
  std::lock_guard lock(impl_->mutex);
  impl_->calls.clear();
  impl_->by_message.clear();
  impl_->first_stream_body.clear();
}

std::string FakeLlm::first_stream_body() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->first_stream_body;
}

}  // namespace kernex::bench
