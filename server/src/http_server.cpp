#include "http_server.hpp"

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <array>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>
#include <sys/socket.h>
#include <vector>

#include "kernex/log.hpp"
#include "kernex/redact.hpp"
#include "random_id.hpp"

namespace kernex::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
using asio::awaitable;
using asio::use_awaitable;
using boost::system::error_code;

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string percent_decode(std::string_view in, bool plus_is_space) {
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%' && i + 2 < in.size()) {
      const int hi = hex_value(in[i + 1]);
      const int lo = hex_value(in[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += (plus_is_space && in[i] == '+') ? ' ' : in[i];
  }
  return out;
}

namespace {

void split_target(std::string_view target, HttpRequest& req) {
  const auto q = target.find('?');
  req.raw_path = std::string(target.substr(0, q));
  req.path = percent_decode(req.raw_path, false);
  if (q == std::string_view::npos) return;
  std::string_view query = target.substr(q + 1);
  while (!query.empty()) {
    const auto amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    const auto eq = pair.find('=');
    std::string key = percent_decode(pair.substr(0, eq), true);
    std::string value =
        eq == std::string_view::npos ? std::string() : percent_decode(pair.substr(eq + 1), true);
    if (!key.empty()) req.query.emplace(std::move(key), std::move(value));
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
  }
}

// The request a parsed message is: method, target, headers (names lower-cased) and body.
HttpRequest to_request(bhttp::request<bhttp::string_body>& msg, std::string request_id) {
  HttpRequest req;
  req.request_id = std::move(request_id);
  req.method = std::string(msg.method_string());
  split_target(msg.target(), req);
  for (const auto& field : msg) {
    std::string name(field.name_string());
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    req.headers.emplace(std::move(name), std::string(field.value()));
  }
  req.body = std::move(msg.body());
  return req;
}

// Counts a connection out when it ends, however it ends.
struct Decrement {
  std::atomic<std::size_t>& n;
  ~Decrement() { --n; }
};

struct Refusal {
  int status;
  const char* code;
  const char* message;
};

// The answer to a request that could not be read; none when the client closed, reset or was
// too slow (there is no one to answer).
std::optional<Refusal> refusal_for(const error_code& ec) {
  if (ec == bhttp::error::body_limit)
    return Refusal{413, "body_too_large", "the request body is larger than serve.max_body_bytes"};
  if (ec == bhttp::error::header_limit) {
    return Refusal{431, "headers_too_large",
                   "the request headers are larger than serve.max_header_bytes"};
  }
  if (ec && ec.category() == beast::http::make_error_code(bhttp::error::bad_target).category() &&
      ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message)
    return Refusal{400, "bad_request", "the request is not valid HTTP/1.1"};
  return std::nullopt;
}

// Protocol text (JSON, the metrics' exposition format) keeps its shape: keys are redacted only
// inside string values, so field names, ids and metric names never change. Anything else (a
// workspace diff) is redacted wherever a piece of a key appears.
std::string redacted_body(std::string_view content_type, std::string body) {
  const bool protocol = content_type.starts_with("application/json") ||
                        content_type.starts_with("text/event-stream") ||
                        content_type.starts_with("text/plain; version=0.0.4");
  return protocol ? redact_secrets_in_json(std::move(body)) : redact_secrets(std::move(body));
}

std::string chunk(std::string_view data) {
  char size[24];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out(size);
  out.append(data);
  out.append("\r\n");
  return out;
}

}  // namespace

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  HttpOptions options;
  Handler handler;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  asio::signal_set signals{ioc, SIGTERM, SIGINT};
  std::atomic<std::size_t> open{0};
  std::atomic<std::uint64_t> next_request{0};

  Impl(HttpOptions o, Handler h) : options(std::move(o)), handler(std::move(h)) {}

  std::string request_id() {
    char buf[24];
    std::snprintf(buf, sizeof buf, "r%llx", static_cast<unsigned long long>(++next_request));
    return buf;
  }

  static void log_line(const HttpRequest& req, int status,
                       std::chrono::steady_clock::time_point started, const std::string& tenant) {
    const auto ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
            .count();
    char took[32];
    std::snprintf(took, sizeof took, "%.1fms", ms);
    // The path only: queries, headers and bodies can carry keys and users' text.
    log(LogLevel::Info, "serve: req=" + req.request_id + " " + req.method + " " + req.path + " " +
                            std::to_string(status) + " " + took +
                            (tenant.empty() ? "" : " tenant=" + tenant));
  }

  // Until `subscribe(waker)` answers that nothing is to be waited for, its waker fires, or `max`
  // passes (then false, and the waker is dropped).
  template <class Subscribe>
  static awaitable<bool> wait_woken(const std::shared_ptr<RunState>& run, Subscribe subscribe,
                                    std::chrono::steady_clock::duration max) {
    auto exec = co_await asio::this_coro::executor;
    auto timer = std::make_shared<asio::steady_timer>(exec, max);
    const auto ticket = subscribe([exec, weak = std::weak_ptr<asio::steady_timer>(timer)] {
      asio::post(exec, [weak] {
        if (auto t = weak.lock()) t->cancel();
      });
    });
    if (!ticket) co_return true;
    error_code ec;
    co_await timer->async_wait(asio::redirect_error(use_awaitable, ec));
    const bool changed = ec == asio::error::operation_aborted;
    if (!changed) run->unwait(*ticket);
    co_return changed;
  }

  // Waits until the run has an event beyond `after` or ended (true), or `max` passed (false).
  static awaitable<bool> wait_change(const std::shared_ptr<RunState>& run, std::uint64_t after,
                                     std::chrono::steady_clock::duration max) {
    co_return co_await wait_woken(
        run, [&](std::function<void()> waker) { return run->wait_after(after, std::move(waker)); },
        max);
  }

  // A new run's 200 (or its stream's head) is its acknowledgement: it leaves once the run's row
  // is committed (RunManager::submit only queues it), or is refused if the row failed.
  static awaitable<void> wait_recorded(const std::shared_ptr<RunState>& run) {
    while (run->record() == RunState::Record::Pending) {
      co_await wait_woken(
          run, [&](std::function<void()> waker) { return run->wait_recorded(std::move(waker)); },
          std::chrono::seconds(60));
    }
  }

  awaitable<bool> write_all(beast::tcp_stream& stream, std::string data) {
    error_code ec;
    stream.expires_after(options.write_timeout);
    co_await asio::async_write(stream, asio::buffer(data), asio::redirect_error(use_awaitable, ec));
    co_return !ec;
  }

  // What followers hold, summed over all of them (and its high-water mark).
  std::atomic<std::uint64_t> buffered{0}, buffered_peak{0}, followers{0}, slow_drops{0};

  // The bytes one follower holds, counted in `buffered` while it holds them.
  struct Held {
    Impl& impl;
    std::uint64_t n = 0;
    void set(std::uint64_t bytes) {
      if (bytes >= n) {
        const std::uint64_t now = impl.buffered.fetch_add(bytes - n) + (bytes - n);
        std::uint64_t peak = impl.buffered_peak.load();
        while (now > peak && !impl.buffered_peak.compare_exchange_weak(peak, now)) {
        }
      } else {
        impl.buffered.fetch_sub(n - bytes);
      }
      n = bytes;
    }
    ~Held() { set(0); }
  };

  // One chunk of a stream, a slice at a time: each slice must reach the client within
  // slow_timeout, or the follower is dropped (it resumes with Last-Event-ID).
  awaitable<bool> write_chunk(beast::tcp_stream& stream, const HttpRequest& req,
                              const std::string& text) {
    constexpr std::size_t kSlice = 64u << 10;
    char size[24];
    std::snprintf(size, sizeof size, "%zx\r\n", text.size());
    const std::array<asio::const_buffer, 3> parts{asio::buffer(size, std::strlen(size)),
                                                  asio::buffer(text), asio::buffer("\r\n", 2)};
    beast::buffers_suffix<std::array<asio::const_buffer, 3>> rest(parts);
    while (beast::buffer_bytes(rest) > 0) {
      error_code ec;
      stream.expires_after(options.slow_timeout);
      const std::size_t n = co_await asio::async_write(stream, beast::buffers_prefix(kSlice, rest),
                                                       asio::redirect_error(use_awaitable, ec));
      if (ec == beast::error::timeout) {
        ++slow_drops;
        log(LogLevel::Info, "serve: req=" + req.request_id +
                                " follower dropped: it read nothing for " +
                                std::to_string(options.slow_timeout.count() / 1000) +
                                " s with its buffer full (serve.stream.slow_timeout_s)");
      }
      if (ec) co_return false;
      rest.consume(n);
    }
    co_return true;
  }

  // What a follower sends next: its own rendered text (at most the buffer), or one event larger
  // than the buffer, rendered once for every follower of the run (RunState::shared_render).
  struct Batch {
    std::vector<std::string> parts;  // rendered events, joined into `text` once all are in
    std::size_t size = 0;
    std::string text;
    RunState::Rendered shared;
    const std::string& bytes() const { return shared ? *shared : text; }
    // One allocation of exactly the batch's size: a growing string would hold up to twice it.
    void join() {
      text.reserve(size);
      for (auto& p : parts) text += p;
      parts = {};
    }
  };

  // Renders events after `after` until the buffer's bound, a page at a time; `after` moves past
  // what was rendered. Whether the run has nothing more (`done`), or the store failed (nullopt).
  std::optional<bool> render_next(const HttpReply& reply, std::uint64_t& after, Batch& out) {
    constexpr std::size_t kPageEvents = 256;
    const std::size_t bound = options.stream_buffer_bytes;
    RunState& run = *reply.stream;
    const std::string& key = reply.render_key;
    RunState::Page page = run.page_after(after, kPageEvents);
    if (page.failed) return std::nullopt;
    for (const auto& e : page.events) {
      if (!key.empty()) {
        if (auto held = run.cached_render(e->id, key)) {
          if (out.size > 0) return false;  // sent alone, next
          out.shared = std::move(held);
          after = e->id;
          return false;
        }
      }
      std::string one = reply.render_event(*e);
      // Past the bound this event waits for the next chunk (unless it is alone in it).
      if (out.size > 0 && out.size + one.size() > bound) return false;
      if (one.size() > bound && !key.empty()) {
        out.shared = run.shared_render(e->id, key, [&] {
          return std::make_shared<const std::string>(redact_secrets_in_json(std::move(one)));
        });
        after = e->id;
        return false;
      }
      out.size += one.size();
      if (!one.empty()) out.parts.push_back(std::move(one));
      after = e->id;
    }
    return page.finished;
  }

  // SSE over a chunked body: the run's events after `after`, live, then the tail and the last
  // chunk. A follower holds at most one buffer of rendered text (stream_buffer_bytes).
  awaitable<bool> write_stream(beast::tcp_stream& stream, const HttpRequest& req,
                               const HttpReply& reply, bool keep_alive) {
    ++followers;
    struct Open {
      std::atomic<std::uint64_t>& n;
      bool open = true;
      void close() {
        if (std::exchange(open, false)) --n;
      }
      ~Open() { close(); }
    } open_stream{followers};
    std::string head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        "X-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\nX-Request-Id: " +
        req.request_id + "\r\n" + (keep_alive ? "" : "Connection: close\r\n");
    for (const auto& [name, value] : reply.headers) head += name + ": " + value + "\r\n";
    head += "\r\n";
    if (!reply.stream_head.empty()) head += chunk(reply.stream_head);
    if (!co_await write_all(stream, std::move(head))) co_return false;
    std::uint64_t after = reply.stream_after;
    Held held{*this};
    for (;;) {
      const std::uint64_t before = after;
      Batch batch;
      const std::optional<bool> done = render_next(reply, after, batch);
      if (!done) co_return false;  // no last chunk: the client sees a cut stream and resumes
      batch.join();
      if (!batch.text.empty()) {
        // Events carry provider errors and model text: redacted as they leave, like every reply.
        batch.text = redact_secrets_in_json(std::move(batch.text));
        held.set(batch.text.capacity());
      }
      if (!batch.bytes().empty()) {
        if (!co_await write_chunk(stream, req, batch.bytes())) co_return false;
        held.set(0);
      }
      if (*done) break;
      if (after != before) continue;
      if (!co_await wait_change(reply.stream, after, options.heartbeat)) {
        if (!co_await write_chunk(stream, req, ": heartbeat\n\n")) co_return false;
      }
    }
    std::string tail = reply.stream_tail.empty() ? std::string()
                                                 : chunk(redact_secrets_in_json(reply.stream_tail));
    tail += "0\r\n\r\n";
    // Off the gauges before the last bytes leave: a client that read the stream's end and then
    // reads /metrics never finds it still counted.
    held.set(0);
    open_stream.close();
    co_return co_await write_all(stream, std::move(tail));
  }

  // Watches the connection of a reply whose run goes on while the client waits: readable with
  // nothing to read (EOF) or an error means the client went away, and the run is cancelled.
  // Readable with data (a pipelined request) means it is there: the watch ends and the bytes
  // stay for the next read. `over` is set (and the wait cancelled) when the reply ended first;
  // the socket is not touched after that, as the connection may be gone.
  struct Watch {
    bool over = false;
  };
  static awaitable<void> watch_disconnect(tcp::socket& socket, std::shared_ptr<Watch> watch,
                                          std::shared_ptr<RunState> run, std::string request_id) {
    for (;;) {
      error_code ec;
      co_await socket.async_wait(tcp::socket::wait_read, asio::redirect_error(use_awaitable, ec));
      if (watch->over) co_return;
      char byte = 0;
      const ssize_t n = ec ? -1 : ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0) co_return;
      if (n < 0 && !ec && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (!is_terminal(run->status())) {
        log(LogLevel::Info, "serve: req=" + request_id + " client gone; cancelling run " + run->id);
        run->request_cancel();
      }
      co_return;
    }
  }

  static void cancel_for_gone_client(const HttpReply& reply, const std::string& request_id) {
    const auto& run = reply.stream ? reply.stream : reply.wait;
    if (!reply.cancel_on_disconnect || !run || is_terminal(run->status())) return;
    log(LogLevel::Info, "serve: req=" + request_id + " client gone; cancelling run " + run->id);
    run->request_cancel();
  }

  // A stream whose run's row could not be stored (the run has ended unstarted, end_unrecorded):
  // the client is told so instead of a 200.
  static HttpReply unrecorded(const HttpReply& streamed) {
    HttpReply reply = HttpReply::error(
        api_error(500, "store_failed", "the run could not be recorded; nothing was started"));
    reply.tenant = streamed.tenant;
    return reply;
  }

  static awaitable<void> wait_end(const std::shared_ptr<RunState>& run) {
    while (!is_terminal(run->status())) {
      co_await wait_woken(
          run, [&](std::function<void()> waker) { return run->wait_ended(std::move(waker)); },
          std::chrono::seconds(60));
    }
  }

  // Routes that may wait (DELETE waits for the session's run to stop) run on their own thread,
  // so the server's few threads keep serving everyone else.
  awaitable<HttpReply> off_thread(const HttpRequest& req) {
    auto exec = co_await asio::this_coro::executor;
    auto timer = std::make_shared<asio::steady_timer>(exec, asio::steady_timer::time_point::max());
    auto reply = std::make_shared<HttpReply>();
    std::thread([self = shared_from_this(), req, reply, timer, exec] {
      *reply = self->handler(req);
      asio::post(exec, [timer] { timer->cancel(); });
    }).detach();
    error_code ec;
    co_await timer->async_wait(asio::redirect_error(use_awaitable, ec));
    co_return std::move(*reply);
  }

  awaitable<bool> write_reply(beast::tcp_stream& stream, const HttpRequest& req,
                              const HttpReply& reply, unsigned version, bool keep_alive) {
    bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(reply.status), version};
    res.set(bhttp::field::content_type, reply.content_type);
    res.set("X-Request-Id", req.request_id);
    for (const auto& [name, value] : reply.headers) res.set(name, value);
    res.keep_alive(keep_alive);
    res.body() = redacted_body(reply.content_type, reply.body);
    res.prepare_payload();
    error_code ec;
    stream.expires_after(options.write_timeout);
    co_await bhttp::async_write(stream, res, asio::redirect_error(use_awaitable, ec));
    co_return !ec;
  }

  awaitable<void> refuse(beast::tcp_stream& stream, int status, const char* code,
                         const char* message) {
    HttpRequest req;
    req.request_id = request_id();
    const HttpReply reply = HttpReply::error(api_error(status, code, message));
    co_await write_reply(stream, req, reply, 11, false);
    log(LogLevel::Info,
        "serve: req=" + req.request_id + " refused " + std::to_string(status) + " " + code);
  }

  // One request off the connection: its first bytes awaited within the idle timeout, then the
  // whole request within the header timeout (a slow client is dropped); one over the limits is
  // refused. Nothing: the connection ends.
  awaitable<std::optional<bhttp::request<bhttp::string_body>>> read_request(
      beast::tcp_stream& stream, beast::flat_buffer& buffer) {
    error_code ec;
    if (buffer.size() == 0) {
      stream.expires_after(options.idle_timeout);  // between requests
      const std::size_t n = co_await stream.async_read_some(
          buffer.prepare(4096), asio::redirect_error(use_awaitable, ec));
      if (ec) co_return std::nullopt;
      buffer.commit(n);
    }
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(
        static_cast<std::uint32_t>(std::min<std::size_t>(options.max_header_bytes, UINT32_MAX)));
    parser.body_limit(options.max_body_bytes);
    stream.expires_after(options.header_timeout);  // the whole request: a slow client is dropped
    co_await bhttp::async_read_header(stream, buffer, parser,
                                      asio::redirect_error(use_awaitable, ec));
    if (!ec && parser.get()[bhttp::field::expect] == "100-continue" && !parser.is_done()) {
      co_await write_all(stream, "HTTP/1.1 100 Continue\r\n\r\n");
    }
    if (!ec && !parser.is_done())
      co_await bhttp::async_read(stream, buffer, parser, asio::redirect_error(use_awaitable, ec));
    if (const std::optional<Refusal> refusal = refusal_for(ec)) {
      co_await refuse(stream, refusal->status, refusal->code, refusal->message);
      co_return std::nullopt;
    }
    if (ec) co_return std::nullopt;  // closed, reset or too slow
    stream.expires_never();
    co_return parser.release();
  }

  // Sends the reply: a stream as its run goes, a wait's once its run has ended. A client gone
  // meanwhile cancels the run if the reply asks for that. False: the write failed.
  awaitable<bool> answer(beast::tcp_stream& stream, const HttpRequest& req, HttpReply reply,
                         unsigned version, bool keep_alive,
                         std::chrono::steady_clock::time_point started) {
    bool ok = true;
    auto watch = std::make_shared<Watch>();
    if (reply.cancel_on_disconnect && (reply.stream || reply.wait)) {
      asio::co_spawn(co_await asio::this_coro::executor,
                     watch_disconnect(stream.socket(), watch,
                                      reply.stream ? reply.stream : reply.wait, req.request_id),
                     asio::detached);
    } else {
      watch->over = true;
    }
    // Ends the watch before the connection reads again or goes (nothing else waits on the
    // socket between replies, so the cancel reaches the watch alone).
    const auto unwatch = [&] {
      if (watch->over) return;
      watch->over = true;
      error_code ignored;
      stream.socket().cancel(ignored);
    };
    if (reply.stream) {
      co_await wait_recorded(reply.stream);
      if (reply.stream->record() == RunState::Record::Failed) {
        // Its end frees the session (RunManager::run_task): the client's next message, sent on
        // the 500, must not find the session still busy with a run that never started.
        co_await wait_end(reply.stream);
        reply = unrecorded(reply);
      }
    }
    if (reply.stream) {
      log_line(req, 200, started, reply.tenant);
      ok = co_await write_stream(stream, req, reply, keep_alive);
    } else {
      if (reply.wait) {
        co_await wait_end(reply.wait);
        std::string tenant = reply.tenant;
        reply = reply.complete(*reply.wait);
        reply.tenant = tenant;
      }
      log_line(req, reply.status, started, reply.tenant);
      unwatch();
      ok = co_await write_reply(stream, req, reply, version, keep_alive);
    }
    unwatch();
    // A write that failed is a client gone too: the watch may have lost the race to see it
    // (unwatch ends it), and then nobody else would cancel the run.
    if (!ok) cancel_for_gone_client(reply, req.request_id);
    co_return ok;
  }

  // Keep-alive: read a request, route it, answer, until the client goes, an answer fails or a
  // request asks to close.
  awaitable<void> connection(tcp::socket socket) {
    const Decrement count{open};
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    for (;;) {
      auto msg = co_await read_request(stream, buffer);
      if (!msg) break;
      // Nothing of a next request has come yet: the read buffer's memory goes while this one is
      // answered, which for a stream lasts as long as its run (4 KiB a connection: 4 MB for a
      // burst of 1 000 streams, 40 MB for 10 000).
      if (buffer.size() == 0) buffer.shrink_to_fit();
      HttpRequest req = to_request(*msg, request_id());
      const bool keep_alive = msg->keep_alive();
      const auto started = std::chrono::steady_clock::now();
      // Not `cond ? co_await ... : handler(req)`: g++ 12 frees the temporary of a conditional
      // holding a co_await too early (ASan: heap-use-after-free in write_reply on every reply).
      HttpReply reply;
      if (req.method == "DELETE") {
        reply = co_await off_thread(req);
      } else {
        reply = handler(req);
      }
      const bool ok =
          co_await answer(stream, req, std::move(reply), msg->version(), keep_alive, started);
      if (!ok || !keep_alive) break;
    }
    error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  }

  awaitable<void> accept_loop() {
    for (;;) {
      error_code ec;
      tcp::socket socket = co_await acceptor.async_accept(asio::make_strand(ioc),
                                                          asio::redirect_error(use_awaitable, ec));
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      if (ec) {
        // Out of descriptors, most likely: wait a little rather than spin.
        log(LogLevel::Warn, "serve: accept failed: " + ec.message());
        asio::steady_timer pause(ioc, std::chrono::milliseconds(50));
        co_await pause.async_wait(asio::redirect_error(use_awaitable, ec));
        continue;
      }
      if (open.load() >= options.max_connections) {
        socket.close(ec);  // over the cap: refused at once, costs nothing
        continue;
      }
      ++open;
      // The executor is read before the socket moves: the order in which a call's arguments
      // are evaluated is unspecified (clang-tidy's use-after-move found it).
      auto executor = socket.get_executor();
      asio::co_spawn(executor, connection(std::move(socket)), asio::detached);
    }
  }
};

HttpServer::HttpServer(HttpOptions options, Handler handler)
    : impl_(std::make_shared<Impl>(std::move(options), std::move(handler))) {}

HttpServer::~HttpServer() { impl_->ioc.stop(); }

Result<std::uint16_t> HttpServer::listen() {
  error_code ec;
  const auto address = asio::ip::make_address(impl_->options.host, ec);
  if (ec)
    return fail(ErrorCode::Config,
                "serve.listen: '" + impl_->options.host + "' is not an IP address");
  const tcp::endpoint endpoint(address, impl_->options.port);
  auto& acc = impl_->acceptor;
  if (acc.open(endpoint.protocol(), ec); ec)
    return fail(ErrorCode::Io, "serve: socket: " + ec.message());
  acc.set_option(asio::socket_base::reuse_address(true), ec);
  if (acc.bind(endpoint, ec); ec) {
    return fail(ErrorCode::Io, "serve: cannot listen on " + impl_->options.host + ":" +
                                   std::to_string(impl_->options.port) + ": " + ec.message());
  }
  if (acc.listen(asio::socket_base::max_listen_connections, ec); ec)
    return fail(ErrorCode::Io, "serve: listen: " + ec.message());
  return acc.local_endpoint().port();
}

void HttpServer::run(std::function<void(int)> on_signal) {
  auto impl = impl_;
  impl->signals.async_wait([impl, on_signal](const error_code& ec, int signal) {
    if (!ec && on_signal) on_signal(signal);
  });
  asio::co_spawn(impl->ioc, impl->accept_loop(), asio::detached);
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < std::max(1u, impl->options.threads); ++i)
    threads.emplace_back([impl] { impl->ioc.run(); });
  impl->ioc.run();
  for (auto& t : threads) t.join();
}

void HttpServer::every(std::chrono::milliseconds period, std::function<void()> task) {
  auto impl = impl_;
  asio::co_spawn(
      impl->ioc,
      [impl, period, task]() -> awaitable<void> {
        asio::steady_timer timer(impl->ioc);
        for (;;) {
          timer.expires_after(period);
          error_code ec;
          co_await timer.async_wait(asio::redirect_error(use_awaitable, ec));
          if (ec) co_return;
          task();
        }
      },
      asio::detached);
}

void HttpServer::stop_accepting() {
  auto impl = impl_;
  asio::post(impl->ioc, [impl] {
    error_code ec;
    impl->acceptor.close(ec);
  });
}

void HttpServer::stop(std::chrono::milliseconds linger) {
  auto impl = impl_;
  asio::co_spawn(
      impl->ioc,
      [impl, linger]() -> awaitable<void> {
        const auto until = std::chrono::steady_clock::now() + linger;
        asio::steady_timer timer(impl->ioc);
        while (impl->open.load() > 0 && std::chrono::steady_clock::now() < until) {
          timer.expires_after(std::chrono::milliseconds(20));
          error_code ec;
          co_await timer.async_wait(asio::redirect_error(use_awaitable, ec));
        }
        impl->ioc.stop();
      },
      asio::detached);
}

std::size_t HttpServer::connections() const { return impl_->open.load(); }

StreamStats HttpServer::stream_stats() const {
  return StreamStats{impl_->buffered.load(), impl_->buffered_peak.load(), impl_->followers.load(),
                     impl_->slow_drops.load()};
}

}  // namespace kernex::server
