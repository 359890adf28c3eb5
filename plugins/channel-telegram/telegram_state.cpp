#include "telegram_state.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "kernex/file_write.hpp"
#include "kernex/files.hpp"
#include "kernex/json.hpp"

namespace kernex::telegram {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kMaxStateBytes = 16u << 20;
// Strangers' chats remembered at once; past this the oldest windows go first.
constexpr std::size_t kMaxFailingChats = 100'000;
constexpr std::size_t kMaxApprovals = 10'000;

Result<void> write_all_synced(const fs::path& path, const std::string& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return fail(ErrorCode::Io, "cannot write " + path.string() + ": " + std::strerror(errno));
  if (auto written = write_all(fd, data, path.string()); !written) {
    ::close(fd);
    return written;
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced) return fail(ErrorCode::Io, "cannot sync " + path.string());
  return {};
}

Result<void> sync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fail(ErrorCode::Io, "cannot open " + dir.string());
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced) return fail(ErrorCode::Io, "cannot sync " + dir.string());
  return {};
}

}  // namespace

TelegramState::TelegramState(TelegramState&& other) noexcept
    : file_(std::move(other.file_)),
      offset_(other.offset_),
      paired_(std::move(other.paired_)),
      generations_(std::move(other.generations_)),
      failures_(std::move(other.failures_)),
      approvals_(std::move(other.approvals_)),
      interrupted_(std::move(other.interrupted_)) {}

Result<TelegramState> TelegramState::load(const fs::path& dir) {
  TelegramState state(dir / "state.json");
  std::error_code ec;
  if (!fs::exists(state.file_, ec)) return state;
  KERNEX_ASSIGN_OR_RETURN(auto text,
                          read_regular_file(state.file_, "telegram state", kMaxStateBytes));
  try {
    const Json j = Json::parse(text);
    // The file is hostile: a float where an integer belongs would be undefined behaviour in
    // nlohmann's get<int64_t>(), so every integer is read through json_int/json_uint.
    const auto integer = [](const Json& v) {
      if (auto n = json_int(v)) return *n;
      throw std::runtime_error("expected an integer, got " + v.dump().substr(0, 40));
    };
    state.offset_ = integer(j.at("offset"));
    for (const auto& user : j.at("paired")) state.paired_.insert(integer(user));
    for (const auto& [scope, gen] : j.at("generations").items()) {
      const auto n = json_uint(gen);
      if (!n) throw std::runtime_error("generations: expected non-negative integers");
      state.generations_[scope] = *n;
    }
    // Absent in files older than the pairing limit.
    if (auto f = j.find("pairing_failures"); f != j.end()) {
      if (!f->is_array() || f->size() > kMaxFailingChats)
        throw std::runtime_error("pairing_failures");
      for (const auto& row : *f) {
        if (!row.is_array() || row.size() != 3 || !row[0].is_number_integer() ||
            !row[1].is_number_unsigned() || !row[2].is_number_integer() ||
            row[1].get<std::uint64_t>() > 1'000'000)
          throw std::runtime_error("pairing_failures: expected [chat, count, since] rows");
        state.failures_[integer(row[0])] = {static_cast<std::uint32_t>(integer(row[1])),
                                            integer(row[2])};
      }
    }
    if (auto a = j.find("approvals"); a != j.end()) {
      if (!a->is_array() || a->size() > kMaxApprovals) throw std::runtime_error("approvals");
      for (const auto& row : *a) {
        if (!row.is_array() || row.size() != 3 || !row[0].is_string() ||
            row[0].get<std::string>().size() > 64 || !row[1].is_number_integer() ||
            !row[2].is_string() || row[2].get<std::string>().size() > 256)
          throw std::runtime_error("approvals: expected [id, chat, tool] rows");
        AskedApproval asked{row[0].get<std::string>(), integer(row[1]), row[2].get<std::string>()};
        state.interrupted_[asked.id] = asked;
        state.approvals_[asked.id] = std::move(asked);
      }
    }
  } catch (const std::exception& e) {
    return fail(ErrorCode::Parse, state.file_.string() +
                                      ": expected {offset, paired, generations, "
                                      "pairing_failures?, approvals?}: " +
                                      e.what());
  }
  return state;
}

Result<void> TelegramState::save_locked() {
  Json failures = Json::array();
  for (const auto& [chat, f] : failures_) failures.push_back(Json::array({chat, f.count, f.since}));
  Json approvals = Json::array();
  for (const auto& [id, a] : approvals_) approvals.push_back(Json::array({a.id, a.chat, a.tool}));
  Json j{{"offset", offset_},
         {"paired", paired_},
         {"generations", generations_},
         {"pairing_failures", std::move(failures)},
         {"approvals", std::move(approvals)}};
  const fs::path tmp = file_.string() + ".tmp";
  KERNEX_RETURN_IF_ERROR(write_all_synced(tmp, j.dump()));
  std::error_code ec;
  fs::rename(tmp, file_, ec);
  if (ec) return fail(ErrorCode::Io, "cannot replace " + file_.string() + ": " + ec.message());
  return sync_dir(file_.parent_path());
}

std::int64_t TelegramState::offset() const {
  std::lock_guard lock(mutex_);
  return offset_;
}

Result<void> TelegramState::set_offset(std::int64_t offset) {
  std::lock_guard lock(mutex_);
  if (offset == offset_) return {};
  offset_ = offset;
  return save_locked();
}

bool TelegramState::paired(std::int64_t user) const {
  std::lock_guard lock(mutex_);
  return paired_.contains(user);
}

Result<void> TelegramState::pair(std::int64_t user) {
  std::lock_guard lock(mutex_);
  paired_.insert(user);
  return save_locked();
}

Result<void> TelegramState::pair(std::int64_t user, std::int64_t chat) {
  std::lock_guard lock(mutex_);
  paired_.insert(user);
  failures_.erase(chat);
  return save_locked();
}

bool TelegramState::pairing_locked(std::int64_t chat, std::int64_t now_s,
                                   std::uint32_t max_attempts, std::int64_t window_s) const {
  std::lock_guard lock(mutex_);
  auto it = failures_.find(chat);
  return it != failures_.end() && it->second.count >= max_attempts &&
         now_s < it->second.since + window_s;
}

Result<TelegramState::Gate> TelegramState::pairing_failed(std::int64_t chat, std::int64_t now_s,
                                                          std::uint32_t max_attempts,
                                                          std::int64_t window_s) {
  std::lock_guard lock(mutex_);
  std::erase_if(failures_, [&](const auto& e) { return now_s >= e.second.since + window_s; });
  Failures& f = failures_[chat];
  if (f.count == 0) f.since = now_s;
  if (f.count >= max_attempts) return Gate::Silent;  // nothing to store: already locked
  ++f.count;
  while (failures_.size() > kMaxFailingChats) {
    auto oldest = std::min_element(
        failures_.begin(), failures_.end(),
        [](const auto& a, const auto& b) { return a.second.since < b.second.since; });
    if (oldest->first == chat) break;
    failures_.erase(oldest);
  }
  KERNEX_RETURN_IF_ERROR(save_locked());
  return f.count >= max_attempts ? Gate::LockedNow : Gate::Refuse;
}

std::uint64_t TelegramState::generation(const std::string& scope) const {
  std::lock_guard lock(mutex_);
  auto it = generations_.find(scope);
  return it == generations_.end() ? 0 : it->second;
}

Result<std::uint64_t> TelegramState::next_generation(const std::string& scope) {
  std::lock_guard lock(mutex_);
  const std::uint64_t next = ++generations_[scope];
  KERNEX_RETURN_IF_ERROR(save_locked());
  return next;
}

Result<void> TelegramState::approval_asked(const AskedApproval& asked) {
  std::lock_guard lock(mutex_);
  if (approvals_.size() >= kMaxApprovals) return {};  // not remembered; still asked
  AskedApproval kept = asked;
  if (kept.tool.size() > 256) kept.tool.resize(256);
  approvals_[kept.id] = std::move(kept);
  return save_locked();
}

Result<void> TelegramState::approval_settled(const std::string& id) {
  std::lock_guard lock(mutex_);
  if (approvals_.erase(id) == 0) return {};
  return save_locked();
}

std::vector<TelegramState::AskedApproval> TelegramState::interrupted() const {
  std::lock_guard lock(mutex_);
  std::vector<AskedApproval> out;
  for (const auto& [id, a] : interrupted_) out.push_back(a);
  return out;
}

bool TelegramState::was_interrupted(const std::string& id) const {
  std::lock_guard lock(mutex_);
  return interrupted_.contains(id);
}

Result<void> TelegramState::clear_interrupted() {
  std::lock_guard lock(mutex_);
  for (const auto& [id, a] : interrupted_) approvals_.erase(id);
  return save_locked();
}

}  // namespace kernex::telegram
