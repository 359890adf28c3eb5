// Random bits for ids (run ids, session ids): not secrets, just unlikely to collide.
#pragma once

#include <cstdint>

namespace kernex::detail {

// A per-thread mt19937_64 seeded once from std::random_device: reading the device on every
// call costs a syscall (or RDRAND retries) per id on the hot path of every run.
std::uint64_t random_u64();

}  // namespace kernex::detail
