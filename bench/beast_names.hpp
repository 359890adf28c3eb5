// The Asio and Beast names the bench's own HTTP servers and clients are written with.
// Asio in a header: bench-only, included by .cpp files that use Asio anyway.
#pragma once

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>

namespace kernex::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

}  // namespace kernex::bench
