#include "workspace_probe.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kernex/log.hpp"
#include "random_id.hpp"

namespace kernex::server {
namespace {

namespace fs = std::filesystem;

Result<void> refuse(const std::string& what, const fs::path& root, const std::string& why) {
  return fail(ErrorCode::Config, what + ": cannot use " + root.string() + " (" + why +
                                     "); every node must reach the sessions' workspaces: "
                                     "refusing to start");
}

Result<void> probe(const std::string& what, const fs::path& root) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return refuse(what, root, "cannot make it: " + ec.message());
  if (!fs::is_directory(root, ec)) return refuse(what, root, "not a directory");
  const fs::path file = root / ("." + random_id("kernex-probe"));
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return refuse(what, root, std::string("cannot write a file: ") + std::strerror(errno));
  static constexpr char kText[] = "kernex workspace probe\n";
  const bool written = ::write(fd, kText, sizeof kText - 1) == sizeof kText - 1 && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  const bool removed = ::unlink(file.c_str()) == 0;
  if (!written) return refuse(what, root, std::string("a write failed: ") + std::strerror(saved));
  if (!removed)
    return refuse(what, root, std::string("cannot remove a file: ") + std::strerror(errno));
  return {};
}

}  // namespace

Result<void> probe_workspaces(const ServeConfig& config, const fs::path& data_dir, bool cluster) {
  KERNEX_RETURN_IF_ERROR(probe("serve.workspaces", config.workspaces_root));
  for (const auto& [tenant, root] : config.tenant_workspaces)
    KERNEX_RETURN_IF_ERROR(probe("serve.tenants." + tenant + ".workspace", root));
  std::error_code ec;
  if (cluster && fs::weakly_canonical(config.workspaces_root, ec) ==
                     fs::weakly_canonical(data_dir / "workspaces", ec)) {
    log(LogLevel::Warn,
        "serve.workspaces is this node's own " + config.workspaces_root.string() +
            ": a session whose runs land on another node will not see its files there; point "
            "serve.workspaces at a directory every node shares");
  }
  return {};
}

}  // namespace kernex::server
