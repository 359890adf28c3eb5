// `kernex serve`'s HTTP request parsing and routing: the input is the raw bytes a client sends on
// one connection to the real server (server::serve, started once per process on a loopback port
// with the replay provider and a data dir of its own), read until the server closes or 1.5 s pass.
// "{RUN}" in the input stands for the id of a run made at start, so /v1/runs/{RUN}/events and its
// Last-Event-ID parse are reached. The server must answer or close; a crash, leak or hang of its
// threads is a finding.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <ostream>
#include <stdexcept>
#include <streambuf>
#include <string>
#include <thread>

#include "fuzz.hpp"
#include "kernex/config.hpp"
#include "kernex/kernel.hpp"
#include "kernex/server/server.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// What serve() announces, kept until its "listening on" line names the port.
class Announce : public std::streambuf {
 public:
  int wait_port(std::chrono::seconds limit) {
    std::unique_lock lock(mutex_);
    const std::string mark = "listening on http://127.0.0.1:";
    if (!changed_.wait_for(lock, limit, [&] { return text_.find('\n') != std::string::npos; }))
      throw std::runtime_error("serve_http: the server did not start");
    const auto at = text_.find(mark);
    if (at == std::string::npos) throw std::runtime_error("serve_http: " + text_);
    return std::stoi(text_.substr(at + mark.size()));
  }

 protected:
  int overflow(int c) override {
    if (c != traits_type::eof()) xsputn(reinterpret_cast<const char*>(&c), 1);
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    std::lock_guard lock(mutex_);
    text_.append(s, static_cast<std::size_t>(n));
    changed_.notify_all();
    return n;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::string text_;
};

// One connection: `request` sent whole, then what comes back until close, `wait` or 1 MiB.
std::string send_request(int port, std::string_view request,
                         std::chrono::milliseconds wait = std::chrono::milliseconds(1500)) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  std::string reply;
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    for (std::size_t sent = 0; sent < request.size();) {
      const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<std::size_t>(n);
    }
    ::shutdown(fd, SHUT_WR);
    const auto deadline = Clock::now() + wait;
    char buf[16384];
    while (reply.size() < (1u << 20)) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd p{fd, POLLIN, 0};
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) break;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      reply.append(buf, static_cast<std::size_t>(n));
    }
  }
  if (fd >= 0) ::close(fd);
  return reply;
}

std::string post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

// The server, its kernel and the run every input may name; made once, never torn down (its
// threads run until the process exits).
struct Served {
  std::filesystem::path dir;
  std::unique_ptr<kernex::Kernel> kernel;
  Announce announce;
  std::ostream announced{&announce};
  int port = 0;
  std::string run_id;

  Served() {
    char tmpl[] = "/tmp/kernex-fuzz-serve-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("serve_http: mkdtemp failed");
    dir = tmpl;
    {
      std::ofstream script(dir / "script.jsonl");
      for (int i = 0; i < 2000; ++i)
        script << R"({"text":"hi )" << i << R"(","usage":{"input_tokens":3,"output_tokens":2}})"
               << "\n";
    }
    const std::string yaml =
        "provider:\n  name: replay\n  options:\n    script: " + (dir / "script.jsonl").string() +
        "\nmemory: sqlite\ndata_dir: " + (dir / "data").string() +
        "\nserve:\n  threads: 2\n  header_timeout_ms: 1000\n"
        "  idle_timeout_ms: 1000\n  heartbeat_s: 1\n  event_retention_s: 5\n"
        "  max_body_bytes: 65536\n  cors_origins: [\"https://app.example\"]\n";
    auto config = kernex::Config::parse_yaml(yaml, "serve_http harness");
    if (!config) throw std::runtime_error(config.error().describe());
    auto made = kernex::Kernel::create(std::move(*config));
    if (!made) throw std::runtime_error(made.error().describe());
    kernel = std::move(*made);
    std::thread([this] {
      kernex::server::ServeOptions options;
      options.listen = "127.0.0.1:0";
      options.announce = &announced;
      if (auto served = kernex::server::serve(*kernel, {}, options); !served)
        announced << "serve failed: " << served.error().describe() << std::endl;
    }).detach();
    port = announce.wait_port(std::chrono::seconds(60));
    // The first run opens the SQLite store and loads the provider: on a loaded machine that takes
    // longer than an input's 1.5 s, and a harness that gives up there fails every run at start.
    const std::string reply = send_request(
        port, post("/v1/sessions/fuzz/messages", R"({"message":"hi"})"), std::chrono::seconds(60));
    const auto at = reply.find("\"run_id\":\"");
    if (at == std::string::npos) throw std::runtime_error("serve_http: no first run: " + reply);
    run_id = reply.substr(at + 10, reply.find('"', at + 10) - at - 10);
  }
};

}  // namespace

KERNEX_FUZZ_TARGET(serve_http) {
  static Served* served = new Served();  // never destroyed: its threads outlive every input
  std::string request(kernex::fuzz::text(data, size));
  for (auto at = request.find("{RUN}"); at != std::string::npos; at = request.find("{RUN}", at))
    request.replace(at, 5, served->run_id);
  (void)send_request(served->port, request);
  return 0;
}
