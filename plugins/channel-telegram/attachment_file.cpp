#include "attachment_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

namespace kernex::telegram {
namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::unexpected<Error> io_error(const std::string& what) {
  return fail(ErrorCode::Io, what + ": " + std::strerror(errno));
}

}  // namespace

Result<void> write_attachment(const std::filesystem::path& dir, const std::string& name,
                              const std::string& body) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    return fail(ErrorCode::Usage, "attachment name '" + name + "' is not a plain file name");
  // The session's workspace is the host's; only the last component is the tools'.
  const Fd parent(::open(dir.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (parent.get() < 0) return io_error("cannot open " + dir.parent_path().string());
  const std::string leaf = dir.filename().string();
  if (::mkdirat(parent.get(), leaf.c_str(), 0700) != 0 && errno != EEXIST)
    return io_error("cannot create " + dir.string());
  const Fd folder(
      ::openat(parent.get(), leaf.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (folder.get() < 0) return io_error(dir.string() + " is not a plain directory");
  const std::string tmp = ".incoming-" + std::to_string(std::random_device{}()) + "-" + name;
  {
    const Fd out(::openat(folder.get(), tmp.c_str(),
                          O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (out.get() < 0) return io_error("cannot create " + (dir / tmp).string());
    std::size_t done = 0;
    while (done < body.size()) {
      const ssize_t n = ::write(out.get(), body.data() + done, body.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::unlinkat(folder.get(), tmp.c_str(), 0);
        return io_error("cannot write " + (dir / tmp).string());
      }
      done += static_cast<std::size_t>(n);
    }
  }
  // rename replaces the directory entry itself: a symlink planted under `name` is replaced,
  // never followed.
  if (::renameat(folder.get(), tmp.c_str(), folder.get(), name.c_str()) != 0) {
    ::unlinkat(folder.get(), tmp.c_str(), 0);
    return io_error("cannot place " + (dir / name).string());
  }
  return {};
}

}  // namespace kernex::telegram
