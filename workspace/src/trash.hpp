// Where accept puts what it displaces. Freeing a file's blocks is the slow part of accept on a
// disk that frees them slowly (ext4 mounted with online discard: ~3 ms per synced file, against
// tens of µs for a rename), so accept does not unlink the old file it exchanged out of the real
// tree, the real file a deletion takes away or the landed entries of upper/: it renames them into
// one trash directory in the layer directory (the same filesystem as upper/; never mounted into a
// sandbox, so no tool reaches it) and the directory is removed after accept returns, by a thread
// the Overlay owns (joined when the Overlay is destroyed) or, if the process died first, when the
// layer is opened again. A trash entry is already out of the real tree and out of upper/, so a
// crash before it is removed loses nothing and shows nothing.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

#include "beneath.hpp"

namespace kernex::workspace::detail {

class Trash {
 public:
  // Makes a fresh trash directory (0700, a name no one else picks) in the layer directory. If it
  // cannot be made, take() always says false (accept then unlinks, as slow as it used to be).
  static Trash make(int layer_dir);
  // Moves `name` in `dir` into the trash; false when it cannot (another filesystem, no write
  // access to a directory's "..") and the caller removes it itself.
  bool take(int dir, const std::string& name);
  // The trash directory, and the name the last take gave its entry there.
  int fd() const { return fd_.get(); }
  std::string last() const { return std::to_string(next_ - 1); }

 private:
  Fd fd_;
  std::size_t next_ = 0;
};

// Whether the layer directory open as `layer_dir` holds a trash directory.
bool has_trash(int layer_dir);
// Removes every trash directory of the layer directory at `layer`. Errors are dropped: what is
// left is found again the next time the layer is opened.
void empty_trash(const std::filesystem::path& layer);

}  // namespace kernex::workspace::detail
