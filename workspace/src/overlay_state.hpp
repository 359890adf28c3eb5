// What an Overlay holds, and the opened layers its operations share.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "beneath.hpp"
#include "kernex/workspace/overlay.hpp"
#include "layer_status.hpp"
#include "manifest.hpp"

namespace kernex::workspace {

struct Overlay::State {
  std::filesystem::path lower;
  std::filesystem::path layer;
  std::string session;
  std::int64_t created_ms = 0;
  XattrNamespace xattr = XattrNamespace::Trusted;
  OverlayLimits limits;
  detail::Manifest manifest;
  // Removes the accept trash (see trash.hpp) after accept returns; last, so it is joined first.
  std::jthread trash_remover;
};

namespace detail {

inline constexpr const char* kMetaFile = ".kernex-overlay.json";
inline constexpr const char* kManifestFile = "manifest";

// Reads the meta file of the layer directory open as `layer_fd` into `state`.
Result<void> read_meta(Overlay::State& state, int layer_fd);

// The layer dir, the real tree and upper/ open, and the Layers view over them.
struct OpenLayers {
  Fd layer_dir;
  Fd lower;
  Fd upper;
  Layers layers;
};
Result<OpenLayers> open_layers(const Overlay::State& state);

// Which of `all` lie at or below any of `paths` (all when empty; a rename matches by either
// path). A path that is absolute or holds ".." is a Usage error.
Result<std::vector<bool>> match_changes(const std::vector<Planned>& all,
                                        const std::vector<std::string>& paths);
// The planned changes at or below any of `paths` (all when empty; a rename matches by either
// path). A path that is absolute or holds ".." is a Usage error.
Result<std::vector<Planned>> select_changes(std::vector<Planned> all,
                                            const std::vector<std::string>& paths);

Result<std::string> diff_changes(const Layers& layers, const std::vector<Planned>& changes);
Result<AcceptResult> accept_changes(Overlay::State& state, OpenLayers& open,
                                    const std::vector<std::string>& paths, bool force,
                                    const KernelGuard& guard);
// Why `change` may not land: the kernel path of `guard` it writes over, unless forced there
// (kernel_guard.cpp).
std::optional<std::string> kernel_refusal(const Change& change, const KernelGuard& guard);
// Whether `change` is at, below or above (taking away) a kernel path of `guard`.
bool touched_kernel_path(const Change& change, const KernelGuard& guard);

class Trash;
// Drops from upper/ (into `trash`) every entry with no change left at or below it; inside an
// opaque or redirected directory nothing goes alone (it would uncover the real tree), only the
// whole.
Result<void> clean_upper(const Layers& layers, const LayerView& view,
                         const std::vector<Planned>& left, Trash& trash, int dir,
                         const std::string& rel);

// Removes `name` in `dir` and all below it without following symlinks, opening up directories
// with no access (mode 000, as overlayfs leaves in work/) that this process may chmod.
Result<void> remove_tree(int dir, const std::string& name, const std::string& where);

}  // namespace detail
}  // namespace kernex::workspace
