#include "random_id.hpp"

#include <sys/random.h>

#include <cstdint>
#include <cstdio>

namespace kernex::server {

std::string random_id(const char* prefix) {
  unsigned char bytes[16] = {};
  std::size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n > 0) got += static_cast<std::size_t>(n);
  }
  std::string out(prefix);
  out += '-';
  char hex[3];
  for (unsigned char b : bytes) {
    std::snprintf(hex, sizeof hex, "%02x", b);
    out += hex;
  }
  return out;
}

}  // namespace kernex::server
