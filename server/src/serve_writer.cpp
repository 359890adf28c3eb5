#include "serve_writer.hpp"

#include <map>
#include <mutex>

#include "kernex/log.hpp"
#include "kernex/sqlite_batch.hpp"
#include "sqlite_db.hpp"

namespace kernex::server {
namespace {

std::mutex registry_mutex;
std::map<std::string, std::weak_ptr<ServeWriter>>& registry() {
  static std::map<std::string, std::weak_ptr<ServeWriter>> writers;
  return writers;
}

}  // namespace

Result<std::shared_ptr<ServeWriter>> ServeWriter::of(const std::filesystem::path& file) {
  std::error_code ec;
  auto key = std::filesystem::weakly_canonical(file, ec);
  if (ec) key = std::filesystem::absolute(file);
  std::lock_guard lock(registry_mutex);
  if (auto found = registry()[key.string()].lock()) return found;
  KERNEX_ASSIGN_OR_RETURN(sqlite3 * db, open_serve_db(file, {}));
  // Closed by ~ServeWriter (close_serve_db: its kept statements first), not by the batch.
  auto batch = std::make_unique<SqliteBatch>(db, false, "serve.db", ErrorCode::Io);
  std::shared_ptr<ServeWriter> writer(
      new ServeWriter(db, std::make_unique<GroupCommit>(std::move(batch))));
  registry()[key.string()] = writer;
  return writer;
}

ServeWriter::~ServeWriter() {
  commit_.reset();  // commits what is queued
  close_serve_db(db_);
  std::lock_guard lock(registry_mutex);
  for (auto it = registry().begin(); it != registry().end();)
    it = it->second.expired() ? registry().erase(it) : std::next(it);
}

void ServeWriter::submit(Work work, std::string what) {
  sqlite3* db = db_;
  commit_->submit_lazy([work = std::move(work), db] { return work(db); },
                       [what = std::move(what)](const Result<void>& r) {
                         if (!r)
                           log(LogLevel::Warn, "serve.db: " + what + ": " + r.error().describe());
                       });
}

void ServeWriter::submit_then(Work work, std::function<void(const Result<void>&)> done) {
  sqlite3* db = db_;
  commit_->submit([work = std::move(work), db] { return work(db); }, false, std::move(done));
}

Result<void> ServeWriter::write(Work work, bool durable) {
  sqlite3* db = db_;
  return commit_->write([&work, db] { return work(db); }, durable);
}

}  // namespace kernex::server
