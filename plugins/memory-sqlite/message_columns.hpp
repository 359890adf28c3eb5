// A message's JSON columns (tool_calls, tool_result, provider_state) as both memory stores write
// and read them: the SQLite store's file, compiled into memory-postgres too (like text_rules), so
// an export of one store reads the same in the other.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/memory.hpp"

namespace kernex::sqlite {

// `j` as JSON text; text that is not valid UTF-8 is an error naming `what`.
Result<std::string> dump_checked(const Json& j, const std::string& what);

// The three JSON columns of one entry, null where the entry has none.
struct EncodedColumns {
  std::optional<std::string> calls, result, state;
};
Result<EncodedColumns> encode_columns(const ContextEntry& e);

// One stored message's columns as read back: whatever a file or an import put there.
struct StoredColumns {
  std::int64_t seq = 0;
  std::string role, content;
  std::optional<std::string> calls, result, state;
};
// The entry, or a Parse error naming `store` (the log prefix), the message's seq and the column.
Result<ContextEntry> decode_columns(StoredColumns c, std::string_view store);

}  // namespace kernex::sqlite
