// Unguessable ids for runs and requests: another tenant's ids are not enumerable.
#pragma once

#include <string>

namespace kernex::server {

// "<prefix>-" + 32 hex digits from the system's CSPRNG.
std::string random_id(const char* prefix);

}  // namespace kernex::server
