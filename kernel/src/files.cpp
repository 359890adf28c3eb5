// The non-blocking, regular-file-only reads of kernex/files.hpp.
#include "kernex/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include <nlohmann/json.hpp>

namespace kernex {

namespace {

// The path JSON-quoted: a name holding control characters cannot reach a terminal raw.
std::string label_of(const std::filesystem::path& path, std::string_view what) {
  return std::string(what) + " " +
         nlohmann::json(path.string())
             .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::unexpected<Error> too_large(const std::string& label, std::size_t max_bytes) {
  return fail(ErrorCode::Limit,
              label + " is larger than " + std::to_string(max_bytes) + " bytes (the cap)");
}

// Reads until end of file or until `limit` bytes are held.
Result<std::string> read_up_to(RegularFile& file, std::size_t limit) {
  std::string out;
  out.resize(static_cast<std::size_t>(std::min<std::uint64_t>(file.size(), limit)));
  std::size_t held = 0;
  while (held < limit) {
    if (held == out.size()) out.resize(std::min(limit, std::max<std::size_t>(4096, 2 * held)));
    KERNEX_ASSIGN_OR_RETURN(auto n, file.read_some(out.data() + held, out.size() - held));
    if (n == 0) break;
    held += n;
  }
  out.resize(held);
  return out;
}

}  // namespace

std::string_view file_kind(std::uint32_t mode) noexcept {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a file";
}

RegularFile::RegularFile(RegularFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), size_(other.size_), label_(std::move(other.label_)) {}

RegularFile& RegularFile::operator=(RegularFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    label_ = std::move(other.label_);
  }
  return *this;
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::size_t> RegularFile::read_some(char* buffer, std::size_t count) {
  for (;;) {
    const ssize_t n = ::read(fd_, buffer, count);
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno != EINTR)
      return fail(ErrorCode::Io, "cannot read " + label_ + ": " + std::strerror(errno));
  }
}

Result<RegularFile> open_regular_file(const std::filesystem::path& path, std::string_view what) {
  std::string label = label_of(path, what);
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever. It changes
  // nothing for a regular file, the only kind accepted below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return fail(ErrorCode::Io, label + " does not exist");
    return fail(ErrorCode::Io, "cannot open " + label + ": " + std::strerror(err));
  }
  RegularFile file(fd, 0, label);
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return fail(ErrorCode::Io, "cannot stat " + label + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return fail(ErrorCode::Io, std::move(label) + " is " + std::string(file_kind(st.st_mode)) +
                                   ", not a regular file");
  file.size_ = static_cast<std::uint64_t>(st.st_size);
  return file;
}

Result<std::string> read_regular_file(const std::filesystem::path& path, std::string_view what,
                                      std::size_t max_bytes) {
  KERNEX_ASSIGN_OR_RETURN(auto file, open_regular_file(path, what));
  const std::string label = label_of(path, what);
  if (file.size() > max_bytes) return too_large(label, max_bytes);
  // One byte past the cap tells a file that grew after the fstat from one that fits exactly.
  const std::size_t limit = max_bytes == SIZE_MAX ? max_bytes : max_bytes + 1;
  KERNEX_ASSIGN_OR_RETURN(auto text, read_up_to(file, limit));
  if (text.size() > max_bytes) return too_large(label, max_bytes);
  return text;
}

Result<std::string> read_regular_file_head(const std::filesystem::path& path, std::string_view what,
                                           std::size_t max_bytes) {
  KERNEX_ASSIGN_OR_RETURN(auto file, open_regular_file(path, what));
  return read_up_to(file, max_bytes);
}

}  // namespace kernex
