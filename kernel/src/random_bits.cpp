#include "random_bits.hpp"

#include <random>

namespace kernex::detail {

std::uint64_t random_u64() {
  thread_local std::mt19937_64 engine = [] {
    std::random_device rd;
    std::seed_seq seed{rd(), rd(), rd(), rd()};
    return std::mt19937_64(seed);
  }();
  return engine();
}

}  // namespace kernex::detail
