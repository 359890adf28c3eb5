// What the kernel keeps of a tool's result in its own records: the audit log in memory, the
// trajectory's tool_call events and the stream's tool_result events of calls from code. A tool
// called from code returns its whole result (up to repl.tool_result_max_bytes, 64 MiB); writing all
// of it into SQLite, the trajectory and the stream on every call cost many times the call itself
// (a 2.5 MB read: ~2.5 MB into memory.db's WAL each time) and grew them without bound, while the
// code already has it. A record keeps the first kRecordedResultMaxBytes, cut on a UTF-8 boundary,
// and says how large the result was. Results for the model are far below the cap and kept whole.
#pragma once

#include <cstddef>
#include <string>

namespace kernex {

inline constexpr std::size_t kRecordedResultMaxBytes = 64 * 1024;

inline std::string recorded_result(const std::string& content) {
  if (content.size() <= kRecordedResultMaxBytes) return content;
  std::size_t n = kRecordedResultMaxBytes;
  while (n > 0 && (static_cast<unsigned char>(content[n]) & 0xC0) == 0x80) --n;
  return content.substr(0, n) + "\n\n... (" + std::to_string(content.size()) +
         " bytes in all; the first " + std::to_string(n) + " are kept in this record)";
}

}  // namespace kernex
