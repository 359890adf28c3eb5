#include "random_id.hpp"

#include <sys/random.h>

#include <chrono>
#include <cstdint>

namespace kernex::server {

std::string random_id(const char* prefix) {
  // The first 6 bytes are the time in milliseconds (big-endian), as in a UUIDv7 (the memory
  // store's conversation ids): ids made one after another sort together, so the indexes keyed by
  // them in serve.db (runs, run_events, the journal's) take new ids at their right edge. Fully
  // random ids put each run's rows on a random page of each index, and every commit rewrites each
  // page it touched into the WAL (group_commit.hpp's busy_delay says what that WAL cost).
  const auto ms =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  unsigned char bytes[16] = {};
  for (int i = 0; i < 6; ++i) bytes[i] = static_cast<unsigned char>(ms >> (8 * (5 - i)));
  // The other 10 bytes (80 bits) from the system's CSPRNG keep ids unguessable.
  std::size_t got = 6;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n > 0) got += static_cast<std::size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(prefix);
  out += '-';
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 0xf];
  }
  return out;
}

}  // namespace kernex::server
