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

Result<std::vector<EncodedColumns>> SqliteStore::encode_exchange(
    const std::vector<ContextEntry>& in) {
  std::vector<EncodedColumns> out;
  out.reserve(in.size());
  for (const auto& e : in) {
    auto columns = encode_columns(e);
    if (!columns)
      return fail(ErrorCode::Memory,
                  "memory-sqlite: saving the exchange failed; nothing of it was saved",
                  columns.error());
    out.push_back(std::move(*columns));
  }
  return out;
}

std::vector<HotMessage> SqliteStore::as_stored(const std::vector<ContextEntry>& in,
                                               const std::vector<EncodedColumns>& columns) {
  std::vector<HotMessage> out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    const ContextEntry& e = in[i];
    const EncodedColumns& c = columns.at(i);
    if (!c.calls && !c.result && !c.state) {
      out.push_back({e, std::nullopt});  // no JSON column: stored and read back as it is
      continue;
    }
    ContextEntry plain;
    plain.role = e.role;
    plain.content = e.content;
    out.push_back({std::move(plain), c});  // decoded when a read asks for it
  }
  return out;
}

Result<void> SqliteStore::save_messages(const MemoryScope& scope,
                                        const std::string& conversation_id,
                                        std::optional<std::vector<HotMessage>> stored,
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
