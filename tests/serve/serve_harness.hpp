// Black-box harness for `kernex serve`: starts the real binary on a loopback port with its own
// config and data dir, and talks to it over raw HTTP/1.1 on POSIX sockets (no Asio, so suites
// build fast). Pieces:
//   ServeProcess  spawn bin/kernex serve, read its "listening on" line, stop it with SIGTERM (or
//   kill -9) Connection    one socket: send raw bytes, read responses (Content-Length, chunked,
//   close) SseReader     a streamed response read event by event (event/id/data), as they arrive
//   FakeLlm       an OpenAI-compatible provider whose replies can hold mid-stream until released;
//   it
//                 logs every call (message, client port, begin/end) to check who called and
//                 overlaps
//   tcp_client_pid  which of some processes owns a loopback connection (by its local port)
//   ServeFixture  a temp dir with config, data dir, replay script helpers
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kernex/json.hpp"

extern char** environ;

namespace kernex::serve_test {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

inline int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

// ---------------------------------------------------------------------------------------------
// Child processes

// This process's environment without KERNEX_* variables that could leak a config in.
inline std::vector<std::string> clean_environment(
    const std::map<std::string, std::string>& extra = {}) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    if (kv.rfind("KERNEX_CONFIG=", 0) == 0 || kv.rfind("KERNEX_DATA_DIR=", 0) == 0) continue;
    bool replaced = false;
    for (const auto& [k, v] : extra) replaced = replaced || kv.rfind(k + "=", 0) == 0;
    if (!replaced) env.push_back(kv);
  }
  for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
  return env;
}

inline pid_t spawn(const std::string& program, const std::vector<std::string>& args, int out_fd,
                   const fs::path& err_file, const std::vector<std::string>& env_in,
                   const std::optional<fs::path>& out_file = std::nullopt) {
  std::vector<std::string> argv_s{program};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s = env_in;
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  if (out_file) {
    posix_spawn_file_actions_addopen(&actions, 1, out_file->c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
  } else {
    posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  }
  posix_spawn_file_actions_addopen(&actions, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                   0600);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot spawn " + program);
  return pid;
}

// Waits for `pid` to exit within `limit`: its exit status (as waitpid reports it), or nullopt.
inline std::optional<int> wait_exit(pid_t pid, milliseconds limit) {
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(limit.count()));
    ::close(pidfd);
  }
  int status = 0;
  if (::waitpid(pid, &status, pidfd >= 0 ? WNOHANG : 0) == pid) return status;
  return std::nullopt;
}

struct ProgramOutcome {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs a program to completion (bounded), output through files so it never blocks on a pipe.
inline ProgramOutcome run_program(const std::string& program, const std::vector<std::string>& args,
                                  const fs::path& scratch,
                                  const std::map<std::string, std::string>& env = {},
                                  milliseconds limit = milliseconds(120000)) {
  static std::atomic<int> counter{0};
  const int n = counter++;
  const fs::path out = scratch / ("run-" + std::to_string(n) + ".out");
  const fs::path err = scratch / ("run-" + std::to_string(n) + ".err");
  const pid_t pid = spawn(program, args, -1, err, clean_environment(env), out);
  ProgramOutcome o;
  auto status = wait_exit(pid, limit);
  if (!status) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    ADD_FAILURE() << program << " did not finish within " << limit.count() << " ms";
  } else if (WIFEXITED(*status)) {
    o.exit_code = WEXITSTATUS(*status);
  }
  o.out = slurp(out);
  o.err = slurp(err);
  return o;
}

inline ProgramOutcome run_kernex(const std::vector<std::string>& args, const fs::path& scratch) {
  return run_program(KERNEX_CLI, args, scratch);
}

// `kernex serve ...` as a child: started by start(), stopped by stop() (SIGTERM) or the destructor.
class ServeProcess {
 public:
  ServeProcess() = default;
  ~ServeProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      if (!wait_exit(pid_, milliseconds(15000))) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
      }
    }
    if (out_fd_ >= 0) ::close(out_fd_);
  }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  // Starts `kernex serve ARGS` and waits for its listening line; false (with the reason in
  // error()) when it exits or says nothing within `limit`.
  bool start(const std::vector<std::string>& args, const fs::path& stderr_file,
             milliseconds limit = milliseconds(60000)) {
    err_file_ = stderr_file;
    if (out_fd_ >= 0) ::close(out_fd_);
    out_fd_ = -1;
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    std::vector<std::string> full{"serve"};
    full.insert(full.end(), args.begin(), args.end());
    pid_ = spawn(KERNEX_CLI, full, fds[1], stderr_file, clean_environment());
    ::close(fds[1]);
    out_fd_ = fds[0];
    const auto deadline = Clock::now() + limit;
    std::string out;
    while (out.find('\n') == std::string::npos) {
      pollfd p{out_fd_, POLLIN, 0};
      if (::poll(&p, 1, remaining_ms(deadline)) <= 0) {
        error_ = "no listening line within " + std::to_string(limit.count()) +
                 " ms; stderr: " + slurp(err_file_);
        return false;
      }
      char buf[512];
      const ssize_t got = ::read(out_fd_, buf, sizeof buf);
      if (got <= 0) {
        auto st = wait_exit(pid_, milliseconds(5000));
        if (st) pid_ = -1;
        error_ = "kernex serve exited before listening (status " +
                 (st ? std::to_string(*st) : "?") + "); stdout: " + out +
                 " stderr: " + slurp(err_file_);
        return false;
      }
      out.append(buf, static_cast<std::size_t>(got));
    }
    first_line_ = out.substr(0, out.find('\n'));
    const std::string prefix = "kernex serve: listening on http://";
    if (first_line_.rfind(prefix, 0) != 0) {
      error_ = "unexpected first stdout line: " + first_line_;
      return false;
    }
    const std::string hostport = first_line_.substr(prefix.size());
    const auto colon = hostport.rfind(':');
    port_ = std::stoi(hostport.substr(colon + 1));
    return port_ > 0;
  }

  // SIGTERM, then wait for exit: the exit status, or nullopt if it outlived `limit`.
  std::optional<int> stop(milliseconds limit = milliseconds(20000)) {
    if (pid_ <= 0) return std::nullopt;
    ::kill(pid_, SIGTERM);
    return wait(limit);
  }
  void signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  std::optional<int> wait(milliseconds limit) {
    auto st = wait_exit(pid_, limit);
    if (st) pid_ = -1;
    return st;
  }
  // kill -9 and reap: true once the process is gone.
  bool kill9(milliseconds limit = milliseconds(10000)) {
    if (pid_ <= 0) return false;
    ::kill(pid_, SIGKILL);
    return wait(limit).has_value();
  }
  bool running() const { return pid_ > 0; }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& error() const { return error_; }
  const std::string& first_line() const { return first_line_; }
  std::string log() const { return slurp(err_file_); }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int port_ = 0;
  fs::path err_file_;
  std::string error_;
  std::string first_line_;
};

// ---------------------------------------------------------------------------------------------
// Raw HTTP/1.1 client

struct HttpResponse {
  int status = 0;  // 0: no response (connection closed or timed out first)
  std::string reason;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string header(const std::string& name) const {
    auto it = headers.find(lower(name));
    return it == headers.end() ? std::string() : it->second;
  }
  Json json() const {
    Json j = Json::parse(body, nullptr, false);
    return j;
  }
  // The error code of an {"error":{"code":...}} body, or "" when the body is not one.
  std::string error_code() const {
    Json j = json();
    if (j.is_object() && j.contains("error") && j["error"].is_object() &&
        j["error"].contains("code") && j["error"]["code"].is_string()) {
      return j["error"]["code"].get<std::string>();
    }
    return "";
  }
  std::string describe() const {
    return "HTTP " + std::to_string(status) + " " + reason + "\n" + body.substr(0, 2000);
  }
};

class Connection {
 public:
  explicit Connection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error("socket failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      fd_ = -1;
      connect_errno_ = errno;
      return;
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Connection() { close(); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  bool connected() const { return fd_ >= 0; }
  int connect_errno() const { return connect_errno_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Sends all of `bytes`; false if the peer closed or reset (the server may answer and close
  // before a too-large request is fully sent).
  bool send(const std::string& bytes) {
    std::size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<std::size_t>(n);
    }
    return true;
  }

  // Reads more bytes into the buffer: >0 read, 0 peer closed (or reset), -1 timeout.
  int fill(Clock::time_point deadline) {
    pollfd p{fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, remaining_ms(deadline));
    if (r <= 0) return -1;
    char buf[16384];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      eof_ = true;
      return 0;
    }
    buffer_.append(buf, static_cast<std::size_t>(n));
    return 1;
  }

  // True if the server closed the connection (EOF or reset) before `deadline`; bytes received
  // meanwhile are kept in buffered().
  bool wait_closed(Clock::time_point deadline) {
    while (!eof_) {
      if (fill(deadline) < 0) return false;
    }
    return true;
  }

  // Reads a response head (status line and headers); false on close/timeout.
  bool read_head(HttpResponse& r, Clock::time_point deadline) {
    std::size_t end;
    while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (fill(deadline) <= 0) return false;
    }
    const std::string head = buffer_.substr(0, end);
    buffer_.erase(0, end + 4);
    std::istringstream in(head);
    std::string line;
    std::getline(in, line);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // HTTP/1.1 200 OK
    const auto sp1 = line.find(' ');
    if (sp1 == std::string::npos) return false;
    const auto sp2 = line.find(' ', sp1 + 1);
    r.status = std::atoi(line.substr(sp1 + 1, sp2 - sp1 - 1).c_str());
    r.reason = sp2 == std::string::npos ? "" : line.substr(sp2 + 1);
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(" \t"));
      while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.pop_back();
      r.headers[lower(line.substr(0, colon))] = value;
    }
    return true;
  }

  // Next decoded body bytes of a chunked body (appends to `out`): 1 data, 0 body ended, -1
  // timeout/close.
  int read_chunk(std::string& out, Clock::time_point deadline) {
    for (;;) {
      const auto eol = buffer_.find("\r\n");
      if (eol != std::string::npos) {
        const std::size_t size = std::strtoul(buffer_.substr(0, eol).c_str(), nullptr, 16);
        if (size == 0) {
          // Trailers end with an empty line.
          while (buffer_.find("\r\n", eol + 2) == std::string::npos && buffer_.size() < eol + 4) {
            if (fill(deadline) <= 0) break;
          }
          const auto end = buffer_.find("\r\n\r\n");
          buffer_.erase(0, end == std::string::npos ? buffer_.size() : end + 4);
          return 0;
        }
        while (buffer_.size() < eol + 2 + size + 2) {
          if (fill(deadline) <= 0) return -1;
        }
        out.append(buffer_, eol + 2, size);
        buffer_.erase(0, eol + 2 + size + 2);
        return 1;
      }
      if (fill(deadline) <= 0) return -1;
    }
  }

  // Reads one whole response (after `send`). For HEAD-less methods only.
  HttpResponse read_response(milliseconds limit = milliseconds(30000)) {
    const auto deadline = Clock::now() + limit;
    HttpResponse r;
    if (!read_head(r, deadline)) return HttpResponse{};
    if (lower(r.header("transfer-encoding")).find("chunked") != std::string::npos) {
      int got;
      while ((got = read_chunk(r.body, deadline)) == 1) {
      }
      if (got < 0) r.headers["x-harness-truncated"] = "1";
    } else if (!r.header("content-length").empty()) {
      const std::size_t len = std::stoul(r.header("content-length"));
      while (buffer_.size() < len) {
        if (fill(deadline) <= 0) break;
      }
      r.body = buffer_.substr(0, std::min(len, buffer_.size()));
      buffer_.erase(0, r.body.size());
    } else if (r.status >= 200 && r.status != 204 && r.status != 304) {
      while (fill(deadline) > 0) {
      }
      r.body = std::move(buffer_);
      buffer_.clear();
    }
    return r;
  }

  std::string& buffered() { return buffer_; }
  bool eof() const { return eof_; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  int connect_errno_ = 0;
  bool eof_ = false;
  std::string buffer_;
};

using Headers = std::vector<std::pair<std::string, std::string>>;

inline std::string build_request(const std::string& method, const std::string& target,
                                 const std::string& body, const Headers& headers = {},
                                 bool close = true) {
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  bool has_type = false;
  for (const auto& [k, v] : headers) {
    req += k + ": " + v + "\r\n";
    has_type = has_type || lower(k) == "content-type";
  }
  if (!body.empty() && !has_type) req += "Content-Type: application/json\r\n";
  if (!body.empty() || method == "POST" || method == "PUT") {
    req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  if (close) req += "Connection: close\r\n";
  return req + "\r\n" + body;
}

inline HttpResponse request(int port, const std::string& method, const std::string& target,
                            const std::string& body = "", const Headers& headers = {},
                            milliseconds limit = milliseconds(30000)) {
  Connection c(port);
  if (!c.connected()) return HttpResponse{};
  c.send(build_request(method, target, body, headers));
  return c.read_response(limit);
}

inline Headers bearer(const std::string& key) { return {{"Authorization", "Bearer " + key}}; }

// ---------------------------------------------------------------------------------------------
// Server-Sent Events

struct SseEvent {
  std::string event;  // "message" when absent
  std::string id;
  std::string data;
  Json json() const { return Json::parse(data, nullptr, false); }
};

// A streamed response, read event by event as the server sends them.
class SseReader {
 public:
  // Sends the request and reads the response head.
  SseReader(int port, const std::string& method, const std::string& target, const std::string& body,
            const Headers& headers = {}, milliseconds limit = milliseconds(30000))
      : conn_(port) {
    if (!conn_.connected()) return;
    Headers h = headers;
    h.emplace_back("Accept", "text/event-stream");
    conn_.send(build_request(method, target, body, h));
    if (!conn_.read_head(head_, Clock::now() + limit)) return;
    chunked_ = lower(head_.header("transfer-encoding")).find("chunked") != std::string::npos;
    if (!head_.header("content-length").empty())
      length_ = std::stoul(head_.header("content-length"));
  }

  const HttpResponse& head() const { return head_; }
  bool ok() const { return head_.status == 200; }
  bool ended() const { return ended_; }
  int heartbeats() const { return heartbeats_; }
  void close() { conn_.close(); }

  // The next event within `limit`, or nullopt when the stream ended or nothing came.
  std::optional<SseEvent> next(milliseconds limit = milliseconds(30000)) {
    const auto deadline = Clock::now() + limit;
    for (;;) {
      if (auto e = parse_one()) return e;
      if (ended_) return std::nullopt;
      if (!more(deadline)) return std::nullopt;
    }
  }

  // Every event until the stream ends (or `limit` passes).
  std::vector<SseEvent> drain(milliseconds limit = milliseconds(30000)) {
    const auto deadline = Clock::now() + limit;
    std::vector<SseEvent> out;
    while (auto e = next(milliseconds(remaining_ms(deadline)))) out.push_back(std::move(*e));
    return out;
  }

  // When the body is not SSE (an error), the rest of it.
  std::string rest_of_body(milliseconds limit = milliseconds(10000)) {
    const auto deadline = Clock::now() + limit;
    while (!ended_ && more(deadline)) {
    }
    return text_;
  }

 private:
  bool more(Clock::time_point deadline) {
    if (chunked_) {
      const int r = conn_.read_chunk(text_, deadline);
      if (r == 0) ended_ = true;
      if (r == -1 && conn_.eof()) ended_ = true;
      return r == 1;
    }
    if (!conn_.buffered().empty()) {
      consume_plain();
      return true;
    }
    const int r = conn_.fill(deadline);
    if (r == 0) ended_ = true;
    if (r <= 0) return false;
    consume_plain();
    return true;
  }
  void consume_plain() {
    std::string& b = conn_.buffered();
    std::size_t take = b.size();
    if (length_) take = std::min(take, *length_ - consumed_);
    text_.append(b, 0, take);
    b.erase(0, take);
    consumed_ += take;
    if (length_ && consumed_ >= *length_) ended_ = true;
  }

  std::optional<SseEvent> parse_one() {
    for (;;) {
      // Events end with a blank line; accept \n\n and \r\n\r\n.
      std::size_t end = std::string::npos, sep = 0;
      for (std::size_t i = 0; i < text_.size(); ++i) {
        if (text_.compare(i, 2, "\n\n") == 0) {
          end = i, sep = 2;
          break;
        }
        if (text_.compare(i, 4, "\r\n\r\n") == 0) {
          end = i, sep = 4;
          break;
        }
      }
      if (end == std::string::npos) return std::nullopt;
      const std::string block = text_.substr(0, end);
      text_.erase(0, end + sep);
      SseEvent e;
      bool any = false;
      std::istringstream in(block);
      std::string line;
      while (std::getline(in, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty()) continue;
        if (line[0] == ':') {
          ++heartbeats_;
          continue;
        }
        const auto colon = line.find(':');
        std::string field = line.substr(0, colon);
        std::string value = colon == std::string::npos ? "" : line.substr(colon + 1);
        if (!value.empty() && value[0] == ' ') value.erase(0, 1);
        if (field == "event") e.event = value, any = true;
        if (field == "id") e.id = value, any = true;
        if (field == "data") {
          e.data += (e.data.empty() && !any_data_ ? "" : "\n") + value;
          any_data_ = true;
          any = true;
        }
      }
      any_data_ = false;
      if (!any) continue;  // a comment-only block
      if (e.event.empty()) e.event = "message";
      return e;
    }
  }

  Connection conn_;
  HttpResponse head_;
  bool chunked_ = false;
  bool ended_ = false;
  bool any_data_ = false;
  std::optional<std::size_t> length_;
  std::size_t consumed_ = 0;
  std::string text_;
  int heartbeats_ = 0;
};

// ---------------------------------------------------------------------------------------------
// A controllable OpenAI-compatible provider

// Answers POST .../chat/completions. Each request gets a Plan from the responder (called on the
// connection's own thread, without locks held): chunks of text streamed as chat.completion.chunk
// events, optionally holding after `hold_after` chunks until release() or the client hangs up.
class FakeLlm {
 public:
  struct Request {
    Json body;
    std::string last_user() const {
      if (!body.contains("messages")) return "";
      std::string last;
      for (const auto& m : body["messages"]) {
        if (m.value("role", "") == "user") {
          if (m["content"].is_string()) {
            last = m["content"].get<std::string>();
          } else if (m["content"].is_array()) {
            last.clear();
            for (const auto& part : m["content"]) last += part.value("text", "");
          }
        }
      }
      return last;
    }
    bool stream() const { return body.value("stream", false); }
  };
  struct Plan {
    std::vector<std::string> chunks{"ok"};
    std::optional<std::size_t> hold_after = {};  // hold after this many chunks were sent
    // Tool calls after the text: [{id, name, arguments (a JSON text)}]; finish "tool_calls".
    Json tool_calls = Json::array();
  };
  // The tool calls ({id, name, arguments}) a streamed answer asks for after its text; none unset.
  using ToolCaller = std::function<std::vector<Json>(const Request&)>;
  void set_tool_caller(ToolCaller caller) {
    std::lock_guard lock(mutex_);
    tool_caller_ = std::move(caller);
  }
  // One provider call as the fake saw it. `ended` is set just before the last bytes the client
  // needs to finish are sent (or when the call is abandoned), so a call that begins after another
  // ended cannot have overlapped it.
  struct Call {
    std::string message;  // last_user()
    int client_port = 0;  // the caller's local port (tcp_client_pid finds the process)
    bool ended = false;
  };

  FakeLlm() {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listen_fd_, 128) != 0) {
      throw std::runtime_error("FakeLlm: bind/listen failed");
    }
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    if (::pipe2(stop_pipe_, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~FakeLlm() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      released_ = true;
    }
    changed_.notify_all();
    (void)!::write(stop_pipe_[1], "x", 1);
    acceptor_.join();
    {
      std::lock_guard lock(mutex_);
      for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : workers_) t.join();
    ::close(listen_fd_);
    ::close(stop_pipe_[0]);
    ::close(stop_pipe_[1]);
  }
  FakeLlm(const FakeLlm&) = delete;
  FakeLlm& operator=(const FakeLlm&) = delete;

  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1"; }
  int port() const { return port_; }
  void set_responder(std::function<Plan(const Request&)> f) {
    std::lock_guard lock(mutex_);
    responder_ = std::move(f);
  }
  // Lets every held reply (now and later) go on.
  void release() {
    {
      std::lock_guard lock(mutex_);
      released_ = true;
    }
    changed_.notify_all();
  }
  std::size_t requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  std::vector<Call> calls() const {
    std::lock_guard lock(mutex_);
    return calls_;
  }
  // Calls whose message is `message`.
  std::size_t calls_for(const std::string& message) const {
    std::lock_guard lock(mutex_);
    return static_cast<std::size_t>(std::count_if(
        calls_.begin(), calls_.end(), [&](const Call& c) { return c.message == message; }));
  }
  // The client port of a call for `message` still going on (e.g. held), once there is one.
  std::optional<int> wait_ongoing(const std::string& message, milliseconds limit) const {
    std::unique_lock lock(mutex_);
    std::optional<int> port;
    changed_.wait_for(lock, limit, [&] {
      for (const auto& c : calls_) {
        if (c.message == message && !c.ended) port = c.client_port;
      }
      return port.has_value();
    });
    return port;
  }
  // The most calls of one group (group_of(message)) that were going on at once, over the log.
  std::size_t max_overlap(const std::function<std::string(const std::string&)>& group_of) const {
    std::lock_guard lock(mutex_);
    std::map<std::string, std::size_t> now, most;
    for (const auto& [index, begin] : log_) {
      const std::string g = group_of(calls_[index].message);
      if (begin) {
        most[g] = std::max(most[g], ++now[g]);
      } else {
        --now[g];
      }
    }
    std::size_t out = 0;
    for (const auto& [g, n] : most) out = std::max(out, n);
    return out;
  }
  std::size_t holding() const {
    std::lock_guard lock(mutex_);
    return holding_;
  }
  // How many held replies ended because the client (kernex) hung up.
  std::size_t hung_up() const {
    std::lock_guard lock(mutex_);
    return hung_up_;
  }
  bool wait_holding(std::size_t n, milliseconds limit) const {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, limit, [&] { return holding_ >= n; });
  }
  bool wait_hung_up(std::size_t n, milliseconds limit) const {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, limit, [&] { return hung_up_ >= n; });
  }

  static std::string chunk_event(const Json& delta, const Json& finish = nullptr) {
    Json j{{"id", "chatcmpl-fake"},
           {"object", "chat.completion.chunk"},
           {"created", 1},
           {"model", "fake"},
           {"choices",
            Json::array({Json{{"index", 0}, {"delta", delta}, {"finish_reason", finish}}})}};
    return "data: " + j.dump() + "\n\n";
  }

 private:
  void accept_loop() {
    for (;;) {
      pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) continue;
      if (fds[1].revents != 0) return;
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      std::lock_guard lock(mutex_);
      open_.push_back(fd);
      workers_.emplace_back([this, fd] { serve(fd); });
    }
  }

  bool read_request(int fd, std::string& buf, Json& body) {
    std::size_t end;
    char tmp[16384];
    auto fill = [&] {
      pollfd fds[2] = {{fd, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
      if (::poll(fds, 2, -1) <= 0 || fds[1].revents != 0) return false;
      const ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
      if (n <= 0) return false;
      buf.append(tmp, static_cast<std::size_t>(n));
      return true;
    };
    while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
      if (!fill()) return false;
    }
    const std::string head = lower(buf.substr(0, end));
    buf.erase(0, end + 4);
    std::size_t len = 0;
    if (auto p = head.find("content-length:"); p != std::string::npos)
      len = std::stoul(head.substr(p + 15));
    while (buf.size() < len) {
      if (!fill()) return false;
    }
    body = Json::parse(buf.substr(0, len), nullptr, false);
    buf.erase(0, len);
    return true;
  }

  // Holds until released (true) or the client hangs up / the fake stops (false).
  bool hold(int fd) {
    {
      std::lock_guard lock(mutex_);
      ++holding_;
    }
    changed_.notify_all();
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        if (changed_.wait_for(lock, milliseconds(20), [&] { return released_; })) {
          --holding_;
          return !stopping_;
        }
      }
      pollfd p{fd, POLLIN | POLLRDHUP, 0};
      if (::poll(&p, 1, 0) > 0) {
        char c;
        if (::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) <= 0) {
          std::lock_guard lock(mutex_);
          --holding_;
          ++hung_up_;
          changed_.notify_all();
          return false;
        }
      }
    }
  }

  static Json openai_calls(const Json& calls) {
    Json out = Json::array();
    for (const auto& c : calls) {
      out.push_back({{"id", c.value("id", "")},
                     {"type", "function"},
                     {"function",
                      {{"name", c.value("name", "")}, {"arguments", c.value("arguments", "{}")}}}});
    }
    return out;
  }

  static bool send_all(int fd, const std::string& s) {
    return ::send(fd, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
  }
  static std::string hex(std::size_t n) {
    char b[32];
    std::snprintf(b, sizeof b, "%zx", n);
    return b;
  }

  void end_call(std::size_t index) {
    {
      std::lock_guard lock(mutex_);
      if (calls_[index].ended) return;
      calls_[index].ended = true;
      log_.emplace_back(index, false);
    }
    changed_.notify_all();
  }

  void answer(int fd, const Request& req, const Plan& plan, std::size_t call) {
    if (!req.stream()) {
      if (plan.hold_after && !hold(fd)) return;
      end_call(call);
      std::string text;
      for (const auto& c : plan.chunks) text += c;
      Json message{{"role", "assistant"}, {"content", text}};
      if (!plan.tool_calls.empty()) message["tool_calls"] = openai_calls(plan.tool_calls);
      Json j{
          {"id", "chatcmpl-fake"},
          {"object", "chat.completion"},
          {"created", 1},
          {"model", "fake"},
          {"choices",
           Json::array({Json{{"index", 0},
                             {"message", message},
                             {"finish_reason", plan.tool_calls.empty() ? "stop" : "tool_calls"}}})},
          {"usage", Json{{"prompt_tokens", 5}, {"completion_tokens", 3}, {"total_tokens", 8}}}};
      const std::string body = j.dump();
      send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body);
      return;
    }
    if (!send_all(fd,
                  "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: "
                  "chunked\r\n\r\n"))
      return;
    auto chunk = [&](const std::string& s) {
      return send_all(fd, hex(s.size()) + "\r\n" + s + "\r\n");
    };
    if (!chunk(chunk_event(Json{{"role", "assistant"}, {"content", ""}}))) return;
    for (std::size_t i = 0; i < plan.chunks.size(); ++i) {
      if (plan.hold_after && i == *plan.hold_after && !hold(fd)) return;
      if (!chunk(chunk_event(Json{{"content", plan.chunks[i]}}))) return;
    }
    if (plan.hold_after && *plan.hold_after >= plan.chunks.size() && !hold(fd)) return;
    end_call(call);
    Json planned = plan.tool_calls;
    ToolCaller caller;
    {
      std::lock_guard lock(mutex_);
      caller = tool_caller_;
    }
    for (const auto& c : caller ? caller(req) : std::vector<Json>{}) {
      planned.push_back({{"id", c.value("id", "call")},
                         {"name", c.value("name", "")},
                         {"arguments", c["arguments"].dump()}});
    }
    const Json calls = openai_calls(planned);
    for (std::size_t i = 0; i < calls.size(); ++i) {
      Json delta = calls[i];
      delta["index"] = i;
      chunk(chunk_event(Json{{"tool_calls", Json::array({delta})}}));
    }
    chunk(chunk_event(Json::object(), planned.empty() ? "stop" : "tool_calls"));
    Json usage{
        {"id", "chatcmpl-fake"},
        {"object", "chat.completion.chunk"},
        {"created", 1},
        {"model", "fake"},
        {"choices", Json::array()},
        {"usage", Json{{"prompt_tokens", 5}, {"completion_tokens", 3}, {"total_tokens", 8}}}};
    chunk("data: " + usage.dump() + "\n\n");
    chunk("data: [DONE]\n\n");
    send_all(fd, "0\r\n\r\n");
  }

  void serve(int fd) {
    std::string buf;
    sockaddr_in peer{};
    socklen_t peer_len = sizeof peer;
    ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len);
    for (;;) {
      Json body;
      if (!read_request(fd, buf, body)) break;
      Request req{body};
      std::function<Plan(const Request&)> responder;
      std::size_t call = 0;
      {
        std::lock_guard lock(mutex_);
        ++requests_;
        responder = responder_;
        call = calls_.size();
        calls_.push_back(Call{req.last_user(), ntohs(peer.sin_port), false});
        log_.emplace_back(call, true);
      }
      changed_.notify_all();
      Plan plan = responder ? responder(req) : Plan{};
      answer(fd, req, plan, call);
      end_call(call);
      if (stopping_) break;
    }
    ::shutdown(fd, SHUT_RDWR);
    std::lock_guard lock(mutex_);
    open_.erase(std::remove(open_.begin(), open_.end(), fd), open_.end());
    ::close(fd);
  }

  int listen_fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  int port_ = 0;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  bool stopping_ = false;
  bool released_ = false;
  std::size_t requests_ = 0, holding_ = 0, hung_up_ = 0;
  std::function<Plan(const Request&)> responder_;
  ToolCaller tool_caller_;
  std::vector<Call> calls_;
  std::vector<std::pair<std::size_t, bool>> log_;  // (call, began) in the order seen
  std::vector<int> open_;
  std::thread acceptor_;
  std::vector<std::thread> workers_;
};

// Which of `candidates` owns the loopback TCP connection whose local port is `client_port` and
// whose peer port is `server_port` (Linux: /proc/net/tcp gives the socket's inode, /proc/PID/fd
// the process holding it); -1 when none does.
inline pid_t tcp_client_pid(int client_port, int server_port,
                            const std::vector<pid_t>& candidates) {
  std::ifstream tcp("/proc/net/tcp");
  std::string line, inode;
  std::getline(tcp, line);  // the column titles
  while (inode.empty() && std::getline(tcp, line)) {
    std::istringstream in(line);
    std::vector<std::string> f;
    for (std::string t; in >> t;) f.push_back(t);
    if (f.size() < 10) continue;
    auto port_of = [](const std::string& addr) {
      const auto colon = addr.find(':');
      return colon == std::string::npos
                 ? -1
                 : static_cast<int>(std::stoul(addr.substr(colon + 1), nullptr, 16));
    };
    if (port_of(f[1]) == client_port && port_of(f[2]) == server_port) inode = f[9];
  }
  if (inode.empty()) return -1;
  const std::string target = "socket:[" + inode + "]";
  for (pid_t pid : candidates) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
      std::error_code link_ec;
      if (fs::read_symlink(e.path(), link_ec).string() == target) return pid;
    }
  }
  return -1;
}

// ---------------------------------------------------------------------------------------------
// Config, data dir, scripts

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "kernex-serve-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path write(const std::string& name, const std::string& text) const {
    auto p = path_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

 private:
  fs::path path_;
};

// One replay script line: a text answer, optionally only for messages containing `match`.
inline std::string replay_text(const std::string& text, const std::string& match = "") {
  Json j{{"text", text}, {"usage", Json{{"input_tokens", 10}, {"output_tokens", 5}}}};
  if (!match.empty()) j["match"] = match;
  return j.dump() + "\n";
}
// One replay script line asking for one tool call.
inline std::string replay_tool_call(const std::string& name, const Json& arguments,
                                    const std::string& id = "c1", const std::string& match = "") {
  Json j{{"tool_calls", Json::array({Json{{"id", id}, {"name", name}, {"arguments", arguments}}})},
         {"usage", Json{{"input_tokens", 10}, {"output_tokens", 5}}}};
  if (!match.empty()) j["match"] = match;
  return j.dump() + "\n";
}

// A test's world: temp dir, data dir, config file, server process.
struct ServeWorld {
  TempDir dir;
  fs::path data_dir = dir.path() / "data";
  fs::path workspace = dir.path() / "ws";
  fs::path config;
  ServeProcess server;

  ServeWorld() {
    fs::create_directories(data_dir);
    fs::create_directories(workspace);
  }

  // Provider blocks for the config.
  std::string replay_provider(const std::string& script_text) const {
    const fs::path script = dir.write("script.jsonl", script_text);
    return "provider:\n  name: replay\n  options:\n    script: " + script.string() + "\n";
  }
  static std::string openai_provider(const FakeLlm& llm) {
    return "provider:\n  name: openai\n  options:\n    base_url: " + llm.base_url() +
           "\n    api_key: test-key\n";
  }

  // Writes kernex.yaml: `provider_block`, sqlite memory in data_dir, `extra` top-level YAML,
  // and a `serve:` section holding `serve_body` (indented two spaces by the caller).
  fs::path write_config(const std::string& provider_block, const std::string& serve_body = "",
                        const std::string& extra = "") {
    std::string y = provider_block;
    y += "memory: sqlite\n";
    y += "data_dir: " + data_dir.string() + "\n";
    y += extra;
    if (!serve_body.empty()) y += "serve:\n" + serve_body;
    config = dir.write("kernex.yaml", y);
    return config;
  }

  // Starts the server on a free loopback port; fails the test (fatally, in the caller's
  // ASSERT_TRUE) when it does not come up.
  bool start(const std::vector<std::string>& extra_args = {}) {
    std::vector<std::string> args{"--config",    config.string(), "--listen",
                                  "127.0.0.1:0", "--data-dir",    data_dir.string()};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    const bool ok = server.start(args, dir.path() / "serve.stderr");
    if (!ok) ADD_FAILURE() << server.error();
    return ok;
  }
  int port() const { return server.port(); }
  std::string log() const { return server.log(); }

  // `kernex serve keys --config CONFIG ARGS...`.
  ProgramOutcome keys(const std::vector<std::string>& args) {
    std::vector<std::string> full{"serve", "keys", "--config", config.string()};
    full.insert(full.end(), args.begin(), args.end());
    return run_kernex(full, dir.path());
  }
  // `kernex serve keys --keys-file FILE ARGS...`.
  ProgramOutcome keys_in(const fs::path& file, const std::vector<std::string>& args) {
    std::vector<std::string> full{"serve", "keys", "--keys-file", file.string()};
    full.insert(full.end(), args.begin(), args.end());
    return run_kernex(full, dir.path());
  }
};

// The key `kernex serve keys add` printed: the longest whitespace-separated token of its stdout.
inline std::string printed_key(const std::string& out) {
  std::istringstream in(out);
  std::string token, best;
  while (in >> token) {
    if (token.size() > best.size()) best = token;
  }
  return best;
}

inline std::string message_body(const std::string& message, Json extra = Json::object()) {
  extra["message"] = message;
  return extra.dump();
}

// The session's saved messages, oldest first (follows next_before pages).
inline std::vector<Json> session_messages(int port, const std::string& session,
                                          const Headers& auth = {}) {
  std::vector<Json> all;
  std::string before;
  for (int page = 0; page < 100; ++page) {
    std::string target = "/v1/sessions/" + session + "/messages?limit=100";
    if (!before.empty()) target += "&before=" + before;
    auto r = request(port, "GET", target, "", auth);
    if (r.status != 200) {
      ADD_FAILURE() << "GET " << target << ": " << r.describe();
      return all;
    }
    Json j = r.json();
    if (!j.contains("messages") || !j["messages"].is_array()) {
      ADD_FAILURE() << "no messages array: " << r.body;
      return all;
    }
    std::vector<Json> got(j["messages"].begin(), j["messages"].end());
    all.insert(all.begin(), got.begin(), got.end());
    if (!j.contains("next_before") || j["next_before"].is_null()) break;
    before = j["next_before"].is_string() ? j["next_before"].get<std::string>()
                                          : j["next_before"].dump();
  }
  std::stable_sort(all.begin(), all.end(), [](const Json& a, const Json& b) {
    return a.value("seq", 0LL) < b.value("seq", 0LL);
  });
  return all;
}

// True when the session has no saved messages: 404 (no such session) or an empty list.
inline bool session_is_empty(int port, const std::string& session, const Headers& auth = {}) {
  auto r = request(port, "GET", "/v1/sessions/" + session + "/messages", "", auth);
  if (r.status == 404) return r.error_code() == "not_found";
  return r.status == 200 && r.json().contains("messages") && r.json()["messages"].empty();
}

inline std::string content_text(const Json& message) {
  if (!message.contains("content")) return "";
  const Json& c = message["content"];
  if (c.is_string()) return c.get<std::string>();
  return c.dump();
}

// ---------------------------------------------------------------------------------------------
// Reading a run's event stream

inline std::vector<std::string> names(const std::vector<SseEvent>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(e.event);
  return out;
}

// Reads events until one named `name` arrives (kept in `seen`); false if the stream ended first.
inline bool read_until(SseReader& sse, const std::string& name, std::vector<SseEvent>& seen,
                       milliseconds limit = milliseconds(30000)) {
  const auto deadline = Clock::now() + limit;
  while (auto e = sse.next(milliseconds(remaining_ms(deadline)))) {
    seen.push_back(*e);
    if (e->event == name) return true;
  }
  return false;
}

// The contract's shape of one run's stream: run_start first, exactly one terminal event, last;
// ids 1, 2, 3...; every event an object naming the run.
inline void expect_well_formed(const std::vector<SseEvent>& events, const std::string& session) {
  ASSERT_GE(events.size(), 2u) << ::testing::PrintToString(names(events));
  EXPECT_EQ(events.front().event, "run_start");
  EXPECT_TRUE(events.back().event == "run_end" || events.back().event == "error")
      << events.back().event;
  const std::string run = events.front().json().value("run_id", "");
  EXPECT_FALSE(run.empty());
  EXPECT_EQ(events.front().json().value("session_id", ""), session);
  for (std::size_t i = 0; i < events.size(); ++i) {
    SCOPED_TRACE(events[i].event + " " + events[i].data);
    EXPECT_EQ(events[i].id, std::to_string(i + 1)) << "ids are 1, 2, 3... per run";
    Json d = events[i].json();
    ASSERT_TRUE(d.is_object());
    EXPECT_EQ(d.value("run_id", ""), run);
  }
  const auto ends = std::count_if(events.begin(), events.end(), [](const SseEvent& e) {
    return e.event == "run_end" || e.event == "error";
  });
  EXPECT_EQ(ends, 1);
}

// The text of the text_delta events from `from` on.
inline std::string cat_text(const std::vector<SseEvent>& events, std::size_t from = 0) {
  std::string text;
  for (std::size_t i = from; i < events.size(); ++i) {
    if (events[i].event == "text_delta") text += events[i].json().value("text", "");
  }
  return text;
}

}  // namespace kernex::serve_test
