// The store's side of the hot history (hot_history.hpp): a hot session's next turn takes its
// history window and count from what its previous turn read and saved, as long as no other
// connection committed since.
#include "message_columns.hpp"
#include "sqlite_store.hpp"

namespace kernex::sqlite {

void SqliteStore::check_hot() {
  if (!hot_on_) return;  // hot_ keeps nothing then
  std::int64_t version = -1;
  if (auto stmt = db_->prepare("PRAGMA data_version"); stmt) {
    if (auto row = stmt->step(); row && *row) version = stmt->integer(0);
  }
  // Another connection committed (or the version could not be read): what hot_ holds may be old.
  if (version < 0 || version != data_version_) hot_.clear();
  data_version_ = version;
}

std::optional<std::vector<ContextEntry>> SqliteStore::as_stored(
    const std::vector<ContextEntry>& in) {
  std::vector<ContextEntry> out;
  out.reserve(in.size());
  for (const auto& e : in) {
    if (e.tool_calls.empty() && !e.tool_result && e.provider_state.is_null()) {
      out.push_back(e);  // no JSON column: stored and read back as it is
      continue;
    }
    auto columns = encode_columns(e);
    if (!columns) return std::nullopt;
    auto back = decode_columns(
        {0, e.role, e.content, columns->calls, columns->result, columns->state}, "memory-sqlite");
    if (!back) return std::nullopt;
    out.push_back(std::move(*back));
  }
  return out;
}

Result<void> SqliteStore::save_messages(const MemoryScope& scope,
                                        const std::string& conversation_id,
                                        std::optional<std::vector<ContextEntry>> stored,
                                        GroupCommit::Work work) {
  {
    Hold lock(*this);
    hot_.saving(scope.tenant(), conversation_id);
  }
  Result<void> r = fail(ErrorCode::Internal, "memory-sqlite: the save threw");
  try {
    r = write(std::move(work));
  } catch (...) {
    Hold lock(*this);
    hot_.saved(scope.tenant(), conversation_id, std::nullopt);
    throw;
  }
  Hold lock(*this);
  hot_.saved(scope.tenant(), conversation_id, r ? std::move(stored) : std::nullopt);
  return r;
}

}  // namespace kernex::sqlite
