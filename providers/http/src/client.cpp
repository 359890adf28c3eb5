// The only translation unit that includes Beast and Asio (each takes ~30 s and >1 GB to build).
// Every step after name resolution is synchronous over the socket's non-blocking descriptor, each
// wait through kernex::wait_fd by the step's deadline (poll_stream.hpp, tcp_connect.hpp): the TCP
// connect, a proxy's CONNECT, the TLS handshake (Asio's TLS engine over the same stream) and the
// exchange. On a fiber of `kernex serve` those waits hold no thread; elsewhere they are poll().
// Name resolution waits the same way (dns_resolve.hpp: c-ares over wait_fd; numeric hosts resolve
// at once). A stop request shuts the socket down (or wakes the resolver), which ends any wait under
// way.
#include "kernex/http/client.hpp"
#include "kernex/number.hpp"
#include "kernex/suspend.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <semaphore>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <openssl/ssl.h>

#include "dns_resolve.hpp"
#include "poll_stream.hpp"
#include "tcp_connect.hpp"

namespace kernex::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;
// A request's body is sent from the caller's string (it outlives the exchange), not a copy of it.
using SentBody = bhttp::span_body<const char>;

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool iequals(std::string_view a, std::string_view b) { return lower(a) == lower(b); }

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::string base64(std::string_view in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned n = (static_cast<unsigned char>(in[i]) << 16) |
                       (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(n >> s) & 63];
  }
  if (i < in.size()) {
    unsigned n = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) n |= static_cast<unsigned char>(in[i + 1]) << 8;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

struct Proxy {
  Url url;
  std::string authorization;  // "Basic ..." or empty
};

Result<Proxy> parse_proxy(std::string text) {
  if (text.find("://") == std::string::npos) text = "http://" + text;
  Proxy proxy;
  const auto scheme_end = text.find("://") + 3;
  const auto at = text.find('@', scheme_end);
  const auto slash = text.find('/', scheme_end);
  if (at != std::string::npos && (slash == std::string::npos || at < slash)) {
    proxy.authorization = "Basic " + base64(text.substr(scheme_end, at - scheme_end));
    text.erase(scheme_end, at + 1 - scheme_end);
  }
  auto url = Url::parse(text);
  if (!url) return fail(ErrorCode::Config, "proxy URL is not valid: " + url.error().message);
  if (url->scheme != "http") return fail(ErrorCode::Config, "only http:// proxies are supported");
  proxy.url = *url;
  return proxy;
}

bool is_timeout(const error_code& ec) {
  return ec == asio::error::timed_out || ec == beast::error::timeout;
}

// The peer closed an idle kept-alive connection: the request never reached a handler (a TLS
// peer may close without its close_notify: a truncated stream).
bool is_stale(const error_code& ec) {
  return ec == bhttp::error::end_of_stream || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
         ec == asio::error::connection_aborted || ec == asio::ssl::error::stream_truncated;
}

using detail::PollStream;
using TlsStream = asio::ssl::stream<detail::TlsLayer>;

// One socket (owned), with TLS over it for https.
struct Connection {
  explicit Connection(int descriptor) : fd(descriptor) {}
  ~Connection() { close(); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  int fd;
  std::unique_ptr<TlsStream> tls;
  beast::flat_buffer buffer;

  void close() {
    if (fd < 0) return;
    ::shutdown(fd, SHUT_RDWR);
    ::close(fd);
    fd = -1;
  }
};

using detail::ShutdownOnStop;

// A failed attempt: whether trying again may help.
struct Failure {
  Error error;
  bool retryable = true;
  // Nothing listens there (most often a local model server that is not running): reported at
  // once, as the last attempt, instead of after 1 + 2 + 4 s of silent backoff.
  bool refused = false;
};

}  // namespace

// ---- Url ----------------------------------------------------------------------------------

Result<Url> Url::parse(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return fail(ErrorCode::Config, "URL `" + std::string(text.substr(0, 200)) + "` " + why);
  };
  const auto sep = text.find("://");
  if (sep == std::string_view::npos) return bad("has no scheme (expected http:// or https://)");
  Url url;
  url.scheme = lower(text.substr(0, sep));
  if (url.scheme != "http" && url.scheme != "https")
    return bad("must start with http:// or https://");
  std::string_view rest = text.substr(sep + 3);
  if (const auto hash = rest.find('#'); hash != std::string_view::npos) rest = rest.substr(0, hash);
  const auto end = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, end);
  std::string target = end == std::string_view::npos ? "/" : std::string(rest.substr(end));
  if (target.front() == '?') target.insert(target.begin(), '/');
  for (char c : target) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
      return bad("contains a space or control character");
  }
  if (authority.find('@') != std::string_view::npos)
    return bad("must not contain user information");
  std::string_view port;
  if (authority.starts_with('[')) {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return bad("has an unterminated IPv6 address");
    url.host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("has text after the IPv6 address");
      port = after.substr(1);
    }
  } else {
    const auto colon = authority.rfind(':');
    url.host = authority.substr(0, colon);
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  url.host = lower(url.host);
  if (url.host.empty()) return bad("has no host");
  for (char c : url.host) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_' &&
        c != ':') {
      return bad("has an invalid host");
    }
  }
  if (port.empty()) {
    url.port = url.scheme == "https" ? "443" : "80";
  } else {
    if (port.size() > 5 ||
        !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return bad("has an invalid port");
    }
    const int n = std::stoi(std::string(port));
    if (n < 1 || n > 65535) return bad("has an invalid port");
    url.port = port;
  }
  url.target = std::move(target);
  return url;
}

bool Url::is_loopback() const {
  if (host == "localhost" || host.ends_with(".localhost")) return true;
  error_code ec;
  const auto addr = asio::ip::make_address(host, ec);
  return !ec && addr.is_loopback();
}

std::string Url::authority() const {
  return host.find(':') != std::string::npos ? "[" + host + "]:" + port : host + ":" + port;
}

std::optional<std::string> Response::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (iequals(k, name)) return v;
  }
  return std::nullopt;
}

std::optional<std::chrono::milliseconds> parse_retry_after(std::string_view value) {
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
  if (value.empty() || value.size() > 9) return std::nullopt;
  if (!std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::chrono::seconds(std::stoll(std::string(value)));
}

bool no_proxy_matches(std::string_view no_proxy, std::string_view host) {
  const std::string h = lower(host);
  std::size_t start = 0;
  while (start <= no_proxy.size()) {
    auto end = no_proxy.find(',', start);
    if (end == std::string_view::npos) end = no_proxy.size();
    std::string entry = lower(no_proxy.substr(start, end - start));
    start = end + 1;
    entry.erase(0, entry.find_first_not_of(" \t"));
    entry.erase(entry.find_last_not_of(" \t") + 1);
    if (const auto colon = entry.rfind(':');
        colon != std::string::npos && entry.find(':') == colon) {
      entry.erase(colon);  // "host:port" entries match the host
    }
    if (entry.empty()) continue;
    if (entry == "*") return true;
    if (entry.front() == '.') entry.erase(0, 1);
    if (h == entry ||
        (h.size() > entry.size() && h.ends_with(entry) && h[h.size() - entry.size() - 1] == '.')) {
      return true;
    }
  }
  return false;
}

// ---- Client -------------------------------------------------------------------------------

struct Client::Impl {
  ClientOptions opts;
  asio::io_context ioc;
  // Made on the first HTTPS connection: a TLS context costs more than many a plain-HTTP request,
  // and a server leases a client per concurrent run.
  std::optional<asio::ssl::context> ssl_context;
  // Held for a whole call (calls are serialised). A semaphore, not a mutex: a call on a fiber may
  // end on another thread than it started on (kernex/suspend.hpp).
  std::binary_semaphore busy{1};
  struct Busy {
    explicit Busy(std::binary_semaphore& s) : s_(s) { s_.acquire(); }
    ~Busy() { s_.release(); }
    Busy(const Busy&) = delete;
    Busy& operator=(const Busy&) = delete;
    std::binary_semaphore& s_;
  };
  std::map<std::string, std::unique_ptr<Connection>> idle;  // one kept-alive connection per origin
  ClientStats stats;
  // Where a body's bytes land between reads: made on the first body, reused (calls are
  // serialised), not zeroed. 2 KiB at first, doubled up to 16 KiB while reads fill it: a
  // provider instance is held by every run in flight, and a streamed answer arrives in events of
  // a few hundred bytes, so a burst of 1 000 streaming runs held 16 MB of buffers that each used
  // a few hundred bytes of (massif, 2026-12-02).
  static constexpr std::size_t kFirstBodyBuffer = 2 * 1024;
  static constexpr std::size_t kMaxBodyBuffer = 16 * 1024;
  std::unique_ptr<char[]> body_buffer;
  std::size_t body_buffer_size = 0;

  // The buffer for the next body read: twice as large when the last read filled it.
  char* body_buffer_for_next_read(std::size_t last_read) {
    std::size_t wanted = body_buffer_size == 0 ? kFirstBodyBuffer : body_buffer_size;
    if (body_buffer_size > 0 && last_read == body_buffer_size && wanted < kMaxBodyBuffer)
      wanted *= 2;
    if (wanted != body_buffer_size) {
      body_buffer = std::make_unique_for_overwrite<char[]>(wanted);
      body_buffer_size = wanted;
    }
    return body_buffer.get();
  }
  bool ca_loaded = false;
  std::stop_token stop;  // the current request's (calls are serialised)

  detail::Resolver resolver;  // host names, without a thread (dns_resolve.hpp)

  explicit Impl(ClientOptions o) : opts(std::move(o)), resolver(opts.dns_servers) {}

  asio::ssl::context& ssl() {
    if (!ssl_context) {
      ssl_context.emplace(asio::ssl::context::tls_client);
      ssl_context->set_verify_mode(asio::ssl::verify_peer);
      ssl_context->set_options(asio::ssl::context::no_sslv2 | asio::ssl::context::no_sslv3 |
                               asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
    }
    return *ssl_context;
  }

  // The system store (honours SSL_CERT_FILE / SSL_CERT_DIR), read on the first HTTPS
  // connection only: reading it takes milliseconds that plain-HTTP local servers never need.
  void load_ca_store() {
    if (ca_loaded) return;
    error_code ec;
    ssl().set_default_verify_paths(ec);
    ca_loaded = true;
  }

  // Now + limit, never past the request's total deadline. Compared as durations from now, so a
  // huge limit (ClientOptions is public) cannot overflow the time point.
  Clock::time_point step_deadline(std::chrono::milliseconds limit, Clock::time_point total) const {
    const auto now = Clock::now();
    const auto capped = saturate(limit);
    return total - now <= capped ? total : now + capped;
  }

  std::string timeout_text(Clock::time_point total) const {
    if (Clock::now() >= total)
      return "timed out (the request's total timeout of " +
             std::to_string(opts.total_timeout.count()) + " ms passed)";
    return "timed out (nothing received for the read timeout of " +
           std::to_string(opts.read_timeout.count()) + " ms)";
  }

  std::optional<Proxy> proxy_for(const Url& url, std::optional<Error>& error) const {
    std::optional<std::string> raw = opts.proxy;
    if (!raw) {
      if (url.is_loopback()) return std::nullopt;
      const std::string no_proxy =
          opts.no_proxy.value_or(env("NO_PROXY").value_or(env("no_proxy").value_or("")));
      if (no_proxy_matches(no_proxy, url.host)) return std::nullopt;
      raw = url.scheme == "https" ? env("HTTPS_PROXY").or_else([] { return env("https_proxy"); })
                                  : env("HTTP_PROXY").or_else([] { return env("http_proxy"); });
    }
    if (!raw || raw->empty()) return std::nullopt;
    auto proxy = parse_proxy(*raw);
    if (!proxy) {
      error = proxy.error();
      return std::nullopt;
    }
    return *proxy;
  }

  // A failure to connect: "connecting to <where>: <what>[: <cause>]".
  static std::unexpected<Failure> connect_failure(const std::string& where, const std::string& what,
                                                  error_code ec, bool retryable = true) {
    std::string msg = "connecting to " + where + ": " + what;
    if (ec) msg += ": " + (is_timeout(ec) ? std::string("timed out") : ec.message());
    return std::unexpected(Failure{Error(ErrorCode::Provider, msg), retryable});
  }

  // Resolves `peer` and opens a TCP connection to it (each address in turn), both by `deadline`;
  // a refusal says so.
  std::expected<std::unique_ptr<Connection>, Failure> open_tcp(const Url& peer,
                                                               const std::string& where,
                                                               Clock::time_point deadline) {
    const auto port = static_cast<std::uint16_t>(std::stoi(peer.port));  // parsed: 1-65535
    auto resolved = resolver.resolve(peer.host, port, deadline, stop);
    if (resolved.outcome != detail::Resolution::Outcome::resolved) {
      const bool config = resolved.outcome == detail::Resolution::Outcome::bad_config;
      return std::unexpected(
          Failure{Error(config ? ErrorCode::Config : ErrorCode::Provider,
                        "connecting to " + where + ": cannot resolve host: " + resolved.cause),
                  !config});
    }
    error_code ec;
    for (const auto& address : resolved.addresses) {
      const auto made = detail::tcp_connect(address.get(), address.length, deadline, stop);
      if (made.fd >= 0) {
        ++stats.connections_opened;
        return std::make_unique<Connection>(made.fd);
      }
      ec = error_code(made.error, boost::system::system_category());
      if (made.error == ETIMEDOUT || made.error == ECANCELED) break;  // no time for the next one
    }
    if (ec == asio::error::connection_refused) {
      auto refused = connect_failure(where, "cannot connect", ec);
      refused.error().refused = true;
      return refused;
    }
    return connect_failure(where, "cannot connect", ec);
  }

  // Asks the proxy for a tunnel to `url` (CONNECT); a proxy's 5xx may pass on a retry.
  std::expected<void, Failure> tunnel(Connection& conn, const Url& url, const Proxy& proxy,
                                      const std::string& where, Clock::time_point total) {
    bhttp::request<bhttp::empty_body> req{bhttp::verb::connect, url.authority(), 11};
    req.set(bhttp::field::host, url.authority());
    if (!proxy.authorization.empty())
      req.set(bhttp::field::proxy_authorization, proxy.authorization);
    PollStream stream(conn.fd);
    stream.deadline = step_deadline(opts.read_timeout, total);
    error_code ec;
    bhttp::write(stream, req, ec);
    bhttp::response_parser<bhttp::empty_body> parser;
    parser.skip(true);  // a CONNECT answer has no body
    if (!ec) {
      stream.deadline = step_deadline(opts.read_timeout, total);
      bhttp::read(stream, conn.buffer, parser, ec);
    }
    if (ec) return connect_failure(where, "CONNECT to " + url.authority() + " failed", ec);
    const int status = static_cast<int>(parser.get().result_int());
    if (status != 200) {
      return connect_failure(
          where, "refused CONNECT to " + url.authority() + " with HTTP " + std::to_string(status),
          {}, status >= 500);
    }
    return {};
  }

  // TLS over the connection, the server's certificate verified for url.host (sent as SNI unless
  // the host is an address).
  std::expected<void, Failure> start_tls(Connection& conn, const Url& url, const std::string& where,
                                         Clock::time_point total) {
    load_ca_store();
    conn.tls = std::make_unique<TlsStream>(detail::TlsLayer(conn.fd, ioc.get_executor()), ssl());
    error_code addr_ec;
    asio::ip::make_address(url.host, addr_ec);
    if (addr_ec && !SSL_set_tlsext_host_name(conn.tls->native_handle(), url.host.c_str())) {
      return connect_failure(where, "cannot set TLS server name", {}, false);
    }
    conn.tls->set_verify_mode(asio::ssl::verify_peer);
    conn.tls->set_verify_callback(asio::ssl::host_name_verification(url.host));
    conn.tls->next_layer().deadline = step_deadline(opts.connect_timeout, total);
    error_code ec;
    conn.tls->handshake(asio::ssl::stream_base::client, ec);
    // A certificate that does not verify will not verify on the next attempt either.
    if (ec)
      return connect_failure(where, "TLS handshake failed", ec, is_timeout(ec) || is_stale(ec));
    return {};
  }

  // TCP to the peer (the proxy, if any) -> a CONNECT tunnel through the proxy -> TLS for https.
  std::expected<std::unique_ptr<Connection>, Failure> connect(const Url& url,
                                                              const std::optional<Proxy>& proxy,
                                                              Clock::time_point total) {
    const Url& peer = proxy ? proxy->url : url;
    const std::string where = proxy ? "proxy " + peer.authority() : url.authority();
    auto conn = open_tcp(peer, where, step_deadline(opts.connect_timeout, total));
    if (!conn) return std::unexpected(std::move(conn).error());
    // Deregistered before `conn` closes the socket on a failure (declared after it).
    const std::stop_callback<ShutdownOnStop> wake(stop, ShutdownOnStop{(**conn).fd});
    if (proxy) {
      if (auto tunnelled = tunnel(**conn, url, *proxy, where, total); !tunnelled)
        return std::unexpected(std::move(tunnelled).error());
    }
    if (url.scheme == "https") {
      if (auto secured = start_tls(**conn, url, where, total); !secured)
        return std::unexpected(std::move(secured).error());
    }
    return conn;
  }

  // The three steps of an exchange as blocking calls on `stream` (the socket's PollStream, or TLS
  // over it), each bounded by its deadline through `timing`, the PollStream underneath.
  template <class Stream>
  struct SyncIo {
    Stream& stream;
    PollStream& timing;
    Connection& conn;
    template <class Message>
    error_code write(Message& msg, Clock::time_point deadline) {
      timing.deadline = deadline;
      error_code ec;
      bhttp::write(stream, msg, ec);
      return ec;
    }
    template <class Parser>
    error_code read_header(Parser& parser, Clock::time_point deadline) {
      timing.deadline = deadline;
      error_code ec;
      bhttp::read_header(stream, conn.buffer, parser, ec);
      return ec;
    }
    template <class Parser>
    error_code read_some(Parser& parser, Clock::time_point deadline) {
      timing.deadline = deadline;
      error_code ec;
      bhttp::read_some(stream, conn.buffer, parser, ec);
      return ec;
    }
  };

  template <class Io>
  std::expected<Response, Failure> exchange(Io io, const Url& url, bhttp::request<SentBody>& req,
                                            const ChunkHandler* on_chunk, Clock::time_point total,
                                            bool reused, bool& stale, std::size_t& delivered) {
    const std::string where = url.authority();
    // A timeout here is final: the server has the request (it may be generating, and billing,
    // an answer), so sending it again would only multiply the wait; it is one attempt.
    auto failure = [&](const std::string& what, error_code ec, bool retryable) {
      std::string msg = what + " " + where;
      if (ec) msg += ": " + (is_timeout(ec) ? timeout_text(total) : ec.message());
      return std::unexpected(
          Failure{Error(ErrorCode::Provider, msg), retryable && !is_timeout(ec)});
    };
    error_code ec = io.write(req, step_deadline(opts.read_timeout, total));
    if (ec) {
      stale = reused && is_stale(ec);
      return failure("sending the request to", ec, true);
    }
    bhttp::response_parser<bhttp::buffer_body> parser;
    parser.body_limit(boost::none);  // counted below, with a clearer message
    parser.header_limit(64 * 1024);
    ec = io.read_header(parser, step_deadline(opts.read_timeout, total));
    if (ec) {
      stale = reused && is_stale(ec);
      return failure("reading the response from", ec, true);
    }
    Response response;
    response.status = static_cast<int>(parser.get().result_int());
    for (const auto& field : parser.get()) {
      response.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    const bool streaming =
        on_chunk != nullptr && *on_chunk && response.status >= 200 && response.status < 300;
    std::size_t received = 0;
    std::size_t n = 0;
    while (!parser.is_done()) {
      char* const buf = body_buffer_for_next_read(n);
      const std::size_t size = body_buffer_size;
      parser.get().body().data = buf;
      parser.get().body().size = size;
      ec = io.read_some(parser, step_deadline(opts.read_timeout, total));
      if (ec == bhttp::error::need_buffer) ec = {};
      n = size - parser.get().body().size;
      if (n > 0) {
        received += n;
        if (received > opts.max_response_bytes) {
          return failure(
              "response larger than " + std::to_string(opts.max_response_bytes) + " bytes from", {},
              false);
        }
        if (streaming) {
          delivered += n;
          if (!(*on_chunk)(std::string_view(buf, n))) {
            return failure("stream aborted by the reader:", {}, false);
          }
        } else {
          response.body.append(buf, n);
        }
      }
      if (ec) {
        return failure(
            received > 0 ? "connection cut mid-response from" : "reading the response body from",
            ec, delivered == 0);
      }
    }
    return response;
  }

  std::expected<Response, Failure> attempt(const Url& url, const Request& request,
                                           const ChunkHandler* on_chunk, Clock::time_point total,
                                           std::size_t& delivered) {
    std::optional<Error> proxy_error;
    const auto proxy = proxy_for(url, proxy_error);
    if (proxy_error) return std::unexpected(Failure{*proxy_error, false});
    const std::string key =
        url.scheme + "://" + url.authority() + (proxy ? " via " + proxy->url.authority() : "");

    bhttp::request<SentBody> req;
    const auto verb = bhttp::string_to_verb(request.method);
    if (verb == bhttp::verb::unknown) {
      return std::unexpected(
          Failure{Error(ErrorCode::Internal, "unknown HTTP method " + request.method), false});
    }
    req.method(verb);
    req.target(url.target);
    req.version(11);
    const bool default_port =
        (url.scheme == "https" && url.port == "443") || (url.scheme == "http" && url.port == "80");
    req.set(bhttp::field::host,
            default_port
                ? (url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host)
                : url.authority());
    req.set(bhttp::field::user_agent, opts.user_agent);
    for (const auto& [name, value] : request.headers) {
      if (name.find_first_of("\r\n:") != std::string::npos ||
          value.find_first_of("\r\n") != std::string::npos) {
        // The value is never printed: it is usually a key.
        return std::unexpected(Failure{
            Error(ErrorCode::Config, "HTTP header `" + name.substr(0, 64) + "` holds a line break"),
            false});
      }
      req.set(name, value);
    }
    req.body() = SentBody::value_type(request.body.data(), request.body.size());
    if (verb != bhttp::verb::get || !request.body.empty()) req.prepare_payload();
    req.keep_alive(true);

    std::unique_ptr<Connection> conn;
    if (auto it = idle.find(key); it != idle.end()) {
      conn = std::move(it->second);
      idle.erase(it);
    }
    for (int fresh_tries = 0;; ++fresh_tries) {
      const bool reused = conn != nullptr;
      if (!conn) {
        KERNEX_ASSIGN_OR_RETURN(auto made, connect(url, proxy, total));
        conn = std::move(made);
      }
      bool stale = false;
      std::expected<Response, Failure> result = std::unexpected(Failure{});
      {
        const std::stop_callback<ShutdownOnStop> wake(stop, ShutdownOnStop{conn->fd});
        if (conn->tls) {
          result = exchange(SyncIo<TlsStream>{*conn->tls, conn->tls->next_layer(), *conn}, url, req,
                            on_chunk, total, reused, stale, delivered);
        } else {
          PollStream plain(conn->fd);
          result = exchange(SyncIo<PollStream>{plain, plain, *conn}, url, req, on_chunk, total,
                            reused, stale, delivered);
        }
      }
      if (!result) {
        conn->close();
        conn.reset();
        // The server dropped a kept-alive connection before answering: not an attempt.
        if (stale && delivered == 0 && fresh_tries == 0 && !stop.stop_requested()) continue;
        return result;
      }
      const auto connection_header = result->header("connection");
      // A stop that came as the exchange ended may have shut the socket down: never reuse it.
      if ((connection_header && iequals(*connection_header, "close")) || stop.stop_requested()) {
        conn->close();
      } else {
        idle[key] = std::move(conn);
      }
      return result;
    }
  }

  // base × 2^(round-1), saturating: no base_ms or round count can overflow it.
  std::chrono::milliseconds backoff(int round) const {
    auto wait = saturate(opts.backoff_base);
    for (int i = 1; i < round && wait < kMaxOptionDuration; ++i) wait = saturate(wait * 2);
    return wait;
  }

  Result<Response> execute(const Request& request, const ChunkHandler* on_chunk) {
    Busy held(busy);
    KERNEX_ASSIGN_OR_RETURN(auto url, Url::parse(request.url));
    stop = request.stop;
    auto cancelled = [&] {
      return fail(ErrorCode::Cancelled, "request to " + url.authority() + " cancelled");
    };
    const auto start = Clock::now();
    const auto total = start + saturate(opts.total_timeout);
    std::optional<Error> last_error;
    std::optional<Response> last_response;
    std::optional<std::chrono::milliseconds> retry_after;
    const int attempts = 1 + std::max(0, opts.max_retries);
    int tries = 0;
    for (int round = 0; round < attempts; ++round) {
      if (round > 0) {
        auto wait = backoff(round);
        if (retry_after)
          wait = std::max(wait, saturate(std::min(*retry_after, opts.retry_after_cap)));
        if (wait >= total - Clock::now()) break;  // no time left for another try
        std::mutex sleep_mutex;
        std::condition_variable_any wake;
        std::unique_lock sleeping(sleep_mutex);
        wake.wait_for(sleeping, stop, wait, [] { return false; });
      }
      if (stop.stop_requested()) return cancelled();
      ++stats.attempts;
      ++tries;
      std::size_t delivered = 0;
      auto result = attempt(url, request, on_chunk, total, delivered);
      if (!result && stop.stop_requested()) return cancelled();
      if (!result) {
        if (!result.error().retryable || delivered > 0)
          return std::unexpected(result.error().error);
        last_error = result.error().error;
        if (result.error().refused) break;
        last_response.reset();
        retry_after.reset();
        continue;
      }
      if (result->status == 429 || result->status >= 500) {
        last_error.reset();
        retry_after.reset();
        if (auto h = result->header("retry-after")) retry_after = parse_retry_after(*h);
        last_response = std::move(*result);
        continue;
      }
      return std::move(*result);
    }
    if (last_response) return std::move(*last_response);
    const auto elapsed =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    return fail(ErrorCode::Provider, last_error ? last_error->message + " (gave up after " +
                                                      std::to_string(tries) + " attempt(s), " +
                                                      std::to_string(elapsed) + " ms)"
                                                : "request to " + url.authority() + " timed out");
  }
};

Client::Client(ClientOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Client::~Client() = default;

Result<Response> Client::send(const Request& request) { return impl_->execute(request, nullptr); }

Result<Response> Client::stream(const Request& request, const ChunkHandler& on_chunk) {
  return impl_->execute(request, &on_chunk);
}

const ClientOptions& Client::options() const { return impl_->opts; }

ClientStats Client::stats() const {
  Impl::Busy held(impl_->busy);
  return impl_->stats;
}

}  // namespace kernex::http
