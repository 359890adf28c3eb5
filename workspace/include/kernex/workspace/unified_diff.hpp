// A line diff of two texts in the unified format `diff -u` and git print: hunks with three lines
// of context, "\ No newline at end of file" where a side ends without one. The edit script is
// Myers' shortest one (O((N+M)·D)) after the common head and tail are trimmed; past a work bound
// the middle is replaced whole, still a correct patch, so time and memory stay bounded.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kernex::workspace {

struct DiffOptions {
  std::size_t context = 3;
  // Myers steps (diagonal moves examined) before the middle is given up on and replaced whole.
  std::size_t max_work = 20'000'000;
};

// The hunks only ("@@ -a,b +c,d @@" and their lines), "" when the texts are equal. Headers
// ("--- a/x", "+++ b/x") are the caller's.
std::string unified_hunks(std::string_view old_text, std::string_view new_text,
                          const DiffOptions& options = {});

}  // namespace kernex::workspace
