// The kernel's one way to write a UTC time as text: "YYYY-MM-DD HH:MM:SS", the form memory stores
// and the serve API show (sortable, engine-neutral; SQLite's datetime() reads it).
#pragma once

#include <cstdint>
#include <string>

namespace kernex {

std::string utc_time(std::int64_t unix_seconds);
std::string utc_now();

}  // namespace kernex
