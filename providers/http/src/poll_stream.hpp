// A connected socket's descriptor as a Beast SyncReadStream/SyncWriteStream: non-blocking
// sendmsg/recvmsg, each wait through wait_ready (on a fiber, without a thread) until `deadline`
// (then asio::error::timed_out). TlsLayer is the same stream as the layer under
// asio::ssl::stream, so TLS handshakes, reads and writes wait the same way: Asio's TLS engine works
// on memory buffers and asks its next layer for the bytes, and every OpenSSL call (and its
// thread-local error queue) ends before a wait begins. Included by client.cpp only (Asio).
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstddef>

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/system/system_error.hpp>

#include "fd_wait.hpp"

namespace kernex::http::detail {

class PollStream {
 public:
  explicit PollStream(int fd) : fd_(fd) {}
  Clock::time_point deadline;

  template <class Buffers>
  std::size_t read_some(const Buffers& buffers, boost::system::error_code& ec) {
    return transfer(buffers, ec, POLLIN,
                    [this](msghdr* m) { return ::recvmsg(fd_, m, MSG_DONTWAIT); });
  }
  template <class Buffers>
  std::size_t write_some(const Buffers& buffers, boost::system::error_code& ec) {
    return transfer(buffers, ec, POLLOUT,
                    [this](msghdr* m) { return ::sendmsg(fd_, m, MSG_DONTWAIT | MSG_NOSIGNAL); });
  }
  template <class Buffers>
  std::size_t read_some(const Buffers& buffers) {
    boost::system::error_code ec;
    const std::size_t n = read_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }
  template <class Buffers>
  std::size_t write_some(const Buffers& buffers) {
    boost::system::error_code ec;
    const std::size_t n = write_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

 private:
  template <class Buffers, class Io>
  std::size_t transfer(const Buffers& buffers, boost::system::error_code& ec, short events, Io io) {
    ec = {};
    iovec iov[16];
    std::size_t count = 0;
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers) && count < 16; ++it) {
      const auto b = boost::asio::buffer(*it);
      if (b.size() == 0) continue;
      iov[count++] = iovec{const_cast<void*>(static_cast<const void*>(b.data())), b.size()};
    }
    if (count == 0) return 0;
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    while (true) {
      const ssize_t n = io(&msg);
      if (n > 0) return static_cast<std::size_t>(n);
      if (n == 0) {
        ec = boost::asio::error::eof;  // only a read returns 0 for a non-empty buffer
        return 0;
      }
      int error = thread_errno();
      if (error == EINTR) continue;
      if (error == EAGAIN || error == EWOULDBLOCK) error = wait_ready(fd_, events, deadline);
      if (error != 0) {
        ec = boost::system::error_code(error, boost::system::system_category());
        return 0;
      }
    }
  }

  int fd_;
};

// What asio::ssl::stream asks of its next layer beyond the synchronous reads and writes: a lowest
// layer and an executor (its asynchronous operations' timers are made on it; none is started).
class TlsLayer : public PollStream {
 public:
  using lowest_layer_type = TlsLayer;
  using executor_type = boost::asio::io_context::executor_type;
  TlsLayer(int fd, executor_type executor) : PollStream(fd), executor_(executor) {}
  lowest_layer_type& lowest_layer() { return *this; }
  executor_type get_executor() const { return executor_; }

 private:
  executor_type executor_;
};

}  // namespace kernex::http::detail
