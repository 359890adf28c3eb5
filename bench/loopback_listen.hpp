// The bench's own servers (fake LLM, bare JSON server) listen on 127.0.0.1 at a port the system
// picks. Asio in a header: bench-only, included by .cpp files that use Asio anyway.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/socket_base.hpp>

namespace kernex::bench {

// Opens, binds and listens `acceptor`; returns the port.
inline unsigned short listen_on_loopback(boost::asio::ip::tcp::acceptor& acceptor) {
  namespace asio = boost::asio;
  const asio::ip::tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"), 0);
  acceptor.open(endpoint.protocol());
  acceptor.set_option(asio::socket_base::reuse_address(true));
  acceptor.bind(endpoint);
  acceptor.listen(asio::socket_base::max_listen_connections);
  return acceptor.local_endpoint().port();
}

}  // namespace kernex::bench
