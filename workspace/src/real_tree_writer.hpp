// Writes into the real tree for accept. Every parent directory is reached by openat with
// O_NOFOLLOW per component, so a symlink anywhere in the real tree (a directory replaced by a
// link to /etc, say) refuses the write instead of leading it outside. New files land only once
// all their data is durable (one syncfs for the batch instead of an fsync per file): an upper
// file on the real tree's filesystem is itself renamed over its target (no copy), anything else
// is copied to a temp file beside the target and renamed over it. The directories changed are
// fsync'ed at the end.
#pragma once

#include <sys/stat.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "layer_status.hpp"
#include "trash.hpp"

namespace kernex::workspace::detail {

class RealTreeWriter {
 public:
  // What a write displaces (an old file, a removed one) goes to `trash` (see trash.hpp).
  RealTreeWriter(const Layers& layers, Trash& trash);
  ~RealTreeWriter();
  RealTreeWriter(const RealTreeWriter&) = delete;
  RealTreeWriter& operator=(const RealTreeWriter&) = delete;

  // Removes `path`: a file or symlink into the trash (unlinked when it cannot go there), a
  // directory with rmdir (one holding anything is an error).
  Result<void> remove(const std::string& path, EntryType type);
  // mkdir with `mode`; an existing directory just takes the mode.
  Result<void> make_dir(const std::string& path, std::uint32_t mode);
  Result<void> set_mode(const std::string& path, std::uint32_t mode);
  // Writes `next`'s content (a file or symlink) to a temp file beside `path`; `id` names it in
  // what commit() reports.
  Result<void> stage(const std::string& path, const NewEntry& next, std::size_t id);
  // Makes the staged data durable, renames each temp file into place, and fsyncs the directories
  // changed. The ids whose rename failed, with why.
  std::vector<std::pair<std::size_t, Error>> commit();

 private:
  struct Staged {
    std::string parent;
    std::string temp;  // empty: the upper file itself lands (see land_moved)
    std::string name;
    std::size_t id;
    NewEntry next;  // where the content comes from
    dev_t dev = 0;  // the upper inode vetted, for a file that lands itself
    ino_t ino = 0;
  };
  Result<void> check_size(const struct stat& st, const std::string& where) const;
  Result<bool> vet_for_move(Staged& s, int dir);
  Result<void> land_moved(int dir, const Staged& s);
  Result<void> copy_and_land(int dir, const Staged& s);
  static bool drop_xattrs(int fd);
  Result<bool> trash_entry(int dir, const std::string& name, const std::string& where);
  Result<int> dir_fd(std::string_view dir);
  Result<int> parent(std::string_view path);
  Result<void> copy_file(const NewEntry& next, int dir, const std::string& temp,
                         const std::string& name, const std::string& where);
  // As root: `fd` (or `name` in `dir` when fd < 0) takes the owner of the entry it replaces
  // (`replacing`) or of the directory.
  void own_like(int dir, const std::string& name, bool replacing, int fd);

  const Layers& layers_;
  Trash& trash_;
  std::string cached_path_;
  Fd cached_;
  std::vector<Staged> staged_;
  std::set<std::string> changed_dirs_;
};

// Whether a symlink at `link_path` with `target` stays inside the tree (lexically: absolute
// targets and ".." past the root are refused): the reason when it does not.
std::optional<std::string> symlink_escape(std::string_view link_path, std::string_view target);

}  // namespace kernex::workspace::detail
