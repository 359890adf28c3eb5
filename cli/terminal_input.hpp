// Lines typed by a person, read so that a stop request (Ctrl-C on a running turn, a cancelled
// run) ends the wait instead of leaving a thread blocked in read().
#pragma once

#include <optional>
#include <stop_token>
#include <string>

namespace kernex::cli {

// The next line from `fd` without its newline (bytes read one at a time, so nothing is buffered
// past it for another reader). Nothing on end of input, a read error or a stop request.
std::optional<std::string> read_line(int fd, std::stop_token stop);

bool stdin_is_terminal();

}  // namespace kernex::cli
