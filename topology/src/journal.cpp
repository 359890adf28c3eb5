#include "journal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <sstream>

#include "kernex/file_write.hpp"
#include "kernex/files.hpp"
#include "kernex/message.hpp"
#include "kernex/tool.hpp"

namespace kernex::topology::detail {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace

Result<void> write_file_atomic(const std::filesystem::path& file, std::string_view content,
                               bool sync) {
  std::random_device rd;
  const auto temp =
      file.parent_path() / ("." + file.filename().string() + ".tmp" + std::to_string(rd()));
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return fail(ErrorCode::Io, temp.string() + ": cannot create: " + errno_text(errno));
  auto written = write_all(fd, content, temp.string());
  if (written && sync && ::fsync(fd) != 0)
    written = fail(ErrorCode::Io, temp.string() + ": fsync failed");
  ::close(fd);
  if (written && ::rename(temp.c_str(), file.c_str()) != 0)
    written = fail(ErrorCode::Io, file.string() + ": rename: " + errno_text(errno));
  if (!written) {
    ::unlink(temp.c_str());
    return written;
  }
  const int dir =
      sync ? ::open(file.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return {};
}

// ---- RunLog ---------------------------------------------------------------------------------

Result<std::unique_ptr<RunLog>> RunLog::open(const std::filesystem::path& dir,
                                             const std::string& digest, const std::string& topology,
                                             const std::string& input, bool sync) {
  std::unique_ptr<RunLog> log(new RunLog());
  log->dir_ = dir;
  log->sync_ = sync;
  std::error_code ec;
  std::filesystem::create_directories(dir / "steps", ec);
  if (ec) return fail(ErrorCode::Io, dir.string() + ": cannot create: " + ec.message());
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
  const auto file = dir / "journal.json";
  if (std::filesystem::exists(std::filesystem::symlink_status(file))) {
    auto text = read_regular_file(file, "topology journal", kMaxJournalBytes);
    if (!text) return std::unexpected(text.error());
    KERNEX_RETURN_IF_ERROR(log->load(*text, digest, input));
    log->resumed_ = true;
    return log;
  }
  log->doc_ = {{"format", 1},
               {"topology", topology},
               {"digest", digest},
               {"input", input},
               {"steps", Json::object()}};
  KERNEX_RETURN_IF_ERROR(write_file_atomic(file, log->doc_.dump(), sync));
  return log;
}

Result<void> RunLog::load(const std::string& text, const std::string& digest,
                          const std::string& input) {
  const std::string where = (dir_ / "journal.json").string();
  Json doc = parse_untrusted(text);
  if (!doc.is_object() || !doc.contains("format") || doc["format"] != 1 ||
      !doc.contains("digest") || !doc["digest"].is_string() || !doc.contains("input") ||
      !doc["input"].is_string() || !doc.contains("steps") || !doc["steps"].is_object())
    return fail(ErrorCode::Parse,
                where + ": not a topology journal (expected {format: 1, digest, input, steps})");
  if (doc["digest"].get<std::string>() != digest)
    return fail(ErrorCode::Usage, where +
                                      ": this run was made by another version of the "
                                      "topology; start a new run");
  if (doc["input"].get<std::string>() != input)
    return fail(ErrorCode::Usage, where + ": this run was started with another input");
  for (const auto& [id, entry] : doc["steps"].items()) {
    const bool turns_ok = !entry.is_object() || !entry.contains("turns") ||
                          json_uint(entry["turns"]).value_or(std::uint64_t{1} << 32) <= 0xFFFFFFFFu;
    if (!entry.is_object() || !entry.contains("text") || !entry["text"].is_string() ||
        !entry.contains("usage") || !entry["usage"].is_object() || !turns_ok)
      return fail(ErrorCode::Parse, where + ": step '" + id.substr(0, 80) + "' is malformed");
    try {
      (void)entry["usage"].get<Usage>();
    } catch (const std::exception&) {
      return fail(ErrorCode::Parse, where + ": step '" + id.substr(0, 80) + "': bad usage");
    }
  }
  doc_ = std::move(doc);
  return {};
}

std::optional<Json> RunLog::step(const std::string& id) const {
  std::lock_guard lock(mutex_);
  auto it = doc_["steps"].find(id);
  if (it == doc_["steps"].end()) return std::nullopt;
  return *it;
}

Result<void> RunLog::record(const std::string& id, Json entry) {
  std::lock_guard lock(mutex_);
  doc_["steps"][id] = std::move(entry);
  return write_file_atomic(dir_ / "journal.json",
                           doc_.dump(-1, ' ', false, Json::error_handler_t::replace), sync_);
}

// ---- StepJournal ----------------------------------------------------------------------------

Result<std::shared_ptr<StepJournal>> StepJournal::open(const std::filesystem::path& file) {
  std::string text;
  if (std::filesystem::exists(std::filesystem::symlink_status(file))) {
    auto read = read_regular_file(file, "agent call journal", kMaxJournalBytes);
    if (!read) return std::unexpected(read.error());
    text = std::move(*read);
  }
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return fail(ErrorCode::Io, file.string() + ": cannot open: " + errno_text(errno));
  std::shared_ptr<StepJournal> journal(new StepJournal(fd));
  journal->replay(text);
  return journal;
}

StepJournal::~StepJournal() {
  if (fd_ >= 0) ::close(fd_);
}

// Each line is one event; a torn last line (the process died writing it) or a malformed one is
// skipped: its call is then made again, or (a started tool) reported as interrupted.
void StepJournal::replay(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    Json j = parse_untrusted(line);
    if (!j.is_object() || !j.contains("k") || !j["k"].is_string()) continue;
    try {
      const auto kind = j["k"].get<std::string>();
      if (kind == "response") {
        std::uint32_t turn = 0;
        json_fields::required(j, "turn", turn);
        responses_[turn] = j.at("response").get<Response>();
      } else if (kind == "tool_started") {
        tools_[j.at("key").get<std::string>()].started = true;
      } else if (kind == "tool_finished") {
        auto& entry = tools_[j.at("key").get<std::string>()];
        entry.started = true;
        entry.result = j.at("result").get<ToolResult>();
      }
    } catch (const std::exception&) {
      continue;
    }
  }
}

// Written through to the file before the call goes on, so a killed process loses nothing; a tool's
// start is also synced to the disk (the tool must never run twice, even after a power cut), a
// model's answer is not (lost in a power cut, it is asked for again).
Result<void> StepJournal::append(const Json& line, bool sync) {
  const std::string text = line.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
  KERNEX_RETURN_IF_ERROR(write_all(fd_, text, "agent call journal"));
  if (sync && ::fdatasync(fd_) != 0)
    return fail(ErrorCode::Io, "agent call journal: fdatasync failed");
  return {};
}

Result<std::optional<Response>> StepJournal::response(std::uint32_t turn) {
  std::lock_guard lock(mutex_);
  auto it = responses_.find(turn);
  if (it == responses_.end()) return std::nullopt;
  return it->second;
}

Result<void> StepJournal::record_response(std::uint32_t turn, const Response& response) {
  std::lock_guard lock(mutex_);
  responses_[turn] = response;
  return append({{"k", "response"}, {"turn", turn}, {"response", response}}, false);
}

Result<RunJournal::ToolEntry> StepJournal::tool(const std::string& key) {
  std::lock_guard lock(mutex_);
  auto it = tools_.find(key);
  return it == tools_.end() ? ToolEntry{} : it->second;
}

Result<void> StepJournal::tool_started(const std::string& key, const ToolCall& call) {
  std::lock_guard lock(mutex_);
  tools_[key].started = true;
  return append({{"k", "tool_started"}, {"key", key}, {"call", call}}, true);
}

Result<void> StepJournal::tool_finished(const std::string& key, const ToolResult& result) {
  std::lock_guard lock(mutex_);
  tools_[key].result = result;
  return append({{"k", "tool_finished"}, {"key", key}, {"result", result}}, true);
}

}  // namespace kernex::topology::detail
