// Session ids in kernex serve: what a client may send, and the one way an id becomes a path
// component (workspaces, overlay layers, trajectories). An id is the client's string (an OpenAI
// `user` such as an e-mail address, say); a file name is ours.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kernex::server {

inline constexpr std::size_t kMaxSessionIdBytes = 256;

// 1-256 bytes of valid UTF-8 without control characters (C0, DEL): any name a client has for a
// conversation or an end user. Control characters are refused because ids go into log lines.
bool valid_session_id(std::string_view id);

// The directory name of session `id` (a valid id): the id itself when it is 1-64 of [a-z0-9_-]
// starting with a letter or digit (the names older versions used), else a readable prefix of it,
// '.', and 24 hex digits of its SHA-256 ("alice_example_com.3f9a..."). Never empty, '.', '..',
// a path, or starting with a dot; two ids never share a name, not even ignoring case (plain
// names are lower-case and have no '.', encoded ones have one and a digest of the exact bytes).
std::string session_dir_name(std::string_view id);

}  // namespace kernex::server
