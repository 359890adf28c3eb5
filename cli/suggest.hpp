// "did you mean ...?" for a mistyped subcommand (`kernex rnu` -> run).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "args.hpp"

namespace kernex::cli {

// The optimal-string-alignment distance (insertions, deletions, substitutions, swaps of two
// neighbours), so `rnu` is one step from `run`.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The one of `names` that `typed` begins, or the closest, when it is close enough to be a typo:
// at most 1 edit for words of up to 4 characters, 2 for longer ones (and never the whole word).
std::optional<std::string> nearest(std::string_view typed, std::span<const std::string> names);

// After a failed parse: the first word of argv that names no subcommand where one was expected,
// with the nearest subcommand ("kernex: unknown command 'rnu'; did you mean 'run'?"); or, when
// argv ends where a subcommand is required (`kernex serve keys`), the ones there are; or nothing.
std::optional<std::string> unknown_subcommand_hint(Command root, int argc, const char* const* argv);

}  // namespace kernex::cli
