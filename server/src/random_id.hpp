// Unguessable ids for runs and requests: another tenant's ids are not enumerable.
#pragma once

#include <string>

namespace kernex::server {

// "<prefix>-" + 32 hex digits: the time in milliseconds (12), then 80 bits from the system's
// CSPRNG (20). Ids sort by when they were made (random_id.cpp says why).
std::string random_id(const char* prefix);

}  // namespace kernex::server
