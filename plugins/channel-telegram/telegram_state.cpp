#include "telegram_state.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kernex/files.hpp"
#include "kernex/json.hpp"

namespace kernex::telegram {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kMaxStateBytes = 16u << 20;

Result<void> write_all_synced(const fs::path& path, const std::string& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return fail(ErrorCode::Io, "cannot write " + path.string() + ": " + std::strerror(errno));
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return fail(ErrorCode::Io, "cannot write " + path.string() + ": " + std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
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
      generations_(std::move(other.generations_)) {}

Result<TelegramState> TelegramState::load(const fs::path& dir) {
  TelegramState state(dir / "state.json");
  std::error_code ec;
  if (!fs::exists(state.file_, ec)) return state;
  KERNEX_ASSIGN_OR_RETURN(auto text,
                          read_regular_file(state.file_, "telegram state", kMaxStateBytes));
  try {
    const Json j = Json::parse(text);
    state.offset_ = j.at("offset").get<std::int64_t>();
    for (const auto& user : j.at("paired")) state.paired_.insert(user.get<std::int64_t>());
    for (const auto& [scope, gen] : j.at("generations").items())
      state.generations_[scope] = gen.get<std::uint64_t>();
  } catch (const std::exception& e) {
    return fail(ErrorCode::Parse,
                state.file_.string() + ": expected {offset, paired, generations}: " + e.what());
  }
  return state;
}

Result<void> TelegramState::save_locked() {
  Json j{{"offset", offset_}, {"paired", paired_}, {"generations", generations_}};
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

}  // namespace kernex::telegram
