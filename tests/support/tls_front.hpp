// A loopback TLS server in front of a plain one (FakeHttpServer, FakeLlm): each TLS connection
// is terminated here with a certificate from test_ca.hpp and relayed, decrypted, over a new TCP
// connection to the backend, so a plain server's scripts serve https:// as they are. A client
// hanging up hangs up the backend connection too.
//
// Mode::stall_mid_handshake relays nothing: it reads the ClientHello, sends the first half of its
// answer (ServerHello...) and then never writes again, leaving the client inside its handshake.
// Plain POSIX sockets and OpenSSL, one thread per connection.
#pragma once

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "loopback_socket.hpp"
#include "test_ca.hpp"

namespace kernex::test {

class TlsFront {
 public:
  enum class Mode { relay, stall_mid_handshake };

  TlsFront(const TlsIdentity& identity, int backend_port, Mode mode = Mode::relay)
      : backend_port_(backend_port), mode_(mode) {
    // OpenSSL writes to the socket with write(): a client that hung up would kill the test
    // process with SIGPIPE instead of failing the write.
    ::signal(SIGPIPE, SIG_IGN);
    ctx_ = SSL_CTX_new(TLS_server_method());
    if (ctx_ == nullptr || SSL_CTX_use_certificate(ctx_, identity.cert.get()) != 1 ||
        SSL_CTX_use_PrivateKey(ctx_, identity.key.get()) != 1) {
      throw std::runtime_error("TlsFront: cannot set up the TLS context");
    }
    const LoopbackListener listener = listen_loopback();
    listen_fd_ = listener.fd;
    port_ = listener.port;
    if (::pipe2(stop_pipe_, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~TlsFront() {
    stopping_ = true;
    (void)!::write(stop_pipe_[1], "x", 1);
    acceptor_.join();
    {
      std::lock_guard lock(mutex_);
      for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : workers_) t.join();
    ::close(listen_fd_);
    ::close(stop_pipe_[0]);
    ::close(stop_pipe_[1]);
    SSL_CTX_free(ctx_);
  }
  TlsFront(const TlsFront&) = delete;
  TlsFront& operator=(const TlsFront&) = delete;

  int port() const { return port_; }
  std::string url(const std::string& path = "") const {
    return "https://127.0.0.1:" + std::to_string(port_) + path;
  }
  std::size_t connections() const { return connections_.load(); }
  std::size_t handshakes() const { return handshakes_.load(); }  // completed
  // Waits (bounded) until `n` clients were stalled halfway through their handshakes at once
  // (Mode::stall_mid_handshake; a client leaves when it gives up).
  bool wait_stalled(std::size_t n, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, limit, [&] { return most_stalled_ >= n; });
  }
  std::size_t most_stalled() {
    std::lock_guard lock(mutex_);
    return most_stalled_;
  }

 private:
  void track(int fd, bool open) {
    std::lock_guard lock(mutex_);
    if (open) {
      open_fds_.push_back(fd);
    } else {
      open_fds_.erase(std::remove(open_fds_.begin(), open_fds_.end(), fd), open_fds_.end());
    }
  }

  void accept_loop() {
    while (!stopping_) {
      pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) continue;
      if (fds[1].revents != 0) return;
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      ++connections_;
      std::lock_guard lock(mutex_);
      open_fds_.push_back(fd);
      workers_.emplace_back([this, fd] {
        if (mode_ == Mode::relay) {
          relay(fd);
        } else {
          stall_handshake(fd);
        }
        track(fd, false);
        ::close(fd);
      });
    }
  }

  // Handshake, then bytes both ways until either side or the stop ends it.
  void relay(int fd) {
    SSL* ssl = SSL_new(ctx_);
    SSL_set_fd(ssl, fd);
    const int backend = SSL_accept(ssl) == 1 ? connect_loopback(backend_port_) : -1;
    if (backend >= 0) {
      ++handshakes_;
      track(backend, true);
      pump(ssl, fd, backend);
      track(backend, false);
      ::shutdown(backend, SHUT_RDWR);
      ::close(backend);
    }
    SSL_free(ssl);
    ERR_clear_error();
  }

  void pump(SSL* ssl, int fd, int backend) {
    char buf[16384];
    while (!stopping_) {
      pollfd fds[3] = {{fd, POLLIN, 0}, {backend, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
      if (SSL_pending(ssl) == 0 && ::poll(fds, 3, -1) < 0) continue;
      if (fds[2].revents != 0) return;
      if (SSL_pending(ssl) > 0 || fds[0].revents != 0) {
        const int n = SSL_read(ssl, buf, sizeof buf);
        if (n <= 0) {
          if (SSL_get_error(ssl, n) == SSL_ERROR_WANT_READ) continue;
          return;
        }
        if (::send(backend, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL) != n) return;
      }
      if (fds[1].revents != 0) {
        const ssize_t n = ::recv(backend, buf, sizeof buf, 0);
        if (n <= 0 || SSL_write(ssl, buf, static_cast<int>(n)) != n) return;
      }
    }
  }

  // The server's first flight is made on memory buffers; half of it is sent.
  void stall_handshake(int fd) {
    SSL* ssl = SSL_new(ctx_);
    BIO* in = BIO_new(BIO_s_mem());
    BIO* out = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl, in, out);
    SSL_set_accept_state(ssl);
    char buf[16384];
    while (BIO_pending(out) == 0) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      BIO_write(in, buf, static_cast<int>(n));
      SSL_do_handshake(ssl);
    }
    const int flight = BIO_read(out, buf, sizeof buf);
    if (flight > 1 && ::send(fd, buf, static_cast<std::size_t>(flight / 2), MSG_NOSIGNAL) > 0) {
      {
        std::lock_guard lock(mutex_);
        most_stalled_ = std::max(most_stalled_, ++stalled_);
      }
      changed_.notify_all();
      pollfd fds[2] = {{fd, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
      ::poll(fds, 2, -1);  // until the client gives up (or the front stops)
      std::lock_guard lock(mutex_);
      --stalled_;
    }
    SSL_free(ssl);
    ERR_clear_error();
  }

  int backend_port_;
  Mode mode_;
  SSL_CTX* ctx_ = nullptr;
  int listen_fd_ = -1;
  int port_ = 0;
  int stop_pipe_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  std::atomic<std::size_t> connections_{0};
  std::atomic<std::size_t> handshakes_{0};
  std::size_t stalled_ = 0;       // now
  std::size_t most_stalled_ = 0;  // at once, ever
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<int> open_fds_;
  std::thread acceptor_;
  std::vector<std::thread> workers_;
};

}  // namespace kernex::test
