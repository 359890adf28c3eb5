// The accept trash: renames in, removal later (see trash.hpp).
#include "trash.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <sys/stat.h>

#include "overlay_state.hpp"

namespace kernex::workspace::detail {

namespace {

constexpr std::string_view kPrefix = ".trash.kernex-";  // temp_name("trash")

bool is_trash(std::string_view name) { return name.starts_with(kPrefix); }

// The names of the trash directories in `layer_dir`.
std::vector<std::string> trash_names(int layer_dir) {
  std::vector<std::string> out;
  const int copy = ::openat(layer_dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* stream = copy < 0 ? nullptr : ::fdopendir(copy);
  if (!stream) {
    if (copy >= 0) ::close(copy);
    return out;
  }
  while (const dirent* e = ::readdir(stream))
    if (is_trash(e->d_name)) out.emplace_back(e->d_name);
  ::closedir(stream);
  return out;
}

}  // namespace

Trash Trash::make(int layer_dir) {
  const std::string name = temp_name("trash");  // starts with kPrefix
  Trash trash;
  if (::mkdirat(layer_dir, name.c_str(), 0700) == 0)
    trash.fd_ =
        Fd(::openat(layer_dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  return trash;
}

bool Trash::take(int dir, const std::string& name) {
  if (fd_.get() < 0) return false;
  const std::string to = std::to_string(next_++);
  return ::renameat2(dir, name.c_str(), fd_.get(), to.c_str(), RENAME_NOREPLACE) == 0;
}

bool has_trash(int layer_dir) { return !trash_names(layer_dir).empty(); }

void empty_trash(const std::filesystem::path& layer) {
  auto dir = open_root(layer.string(), "layer directory");
  if (!dir) return;
  for (const std::string& name : trash_names(dir->get()))
    (void)remove_tree(dir->get(), name, label("accept trash", layer.string(), name));
}

}  // namespace kernex::workspace::detail
