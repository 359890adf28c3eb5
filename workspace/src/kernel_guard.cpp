// Accept's guard over kernel paths (KernelGuard): a change an overlay run made over a file the
// kernel reads, keeps or trusts lands only where the person forced it by name.
#include <algorithm>

#include "beneath.hpp"
#include "overlay_state.hpp"

namespace kernex::workspace::detail {

namespace {

// A change reaches `kernel` when it is at or below it (by its path, or a rename's origin), or
// takes away or replaces a directory above it.
bool reaches(const Change& c, std::string_view kernel) {
  if (at_or_below(c.path, kernel)) return true;
  if (c.kind == ChangeKind::Renamed && at_or_below(c.from, kernel)) return true;
  return c.kind != ChangeKind::Added && at_or_below(kernel, c.path);
}

// A rename out of a kernel path takes it away: only a forced path naming the kernel path lands
// it, never one naming where it went.
bool forced_at(const Change& c, std::string_view kernel, const KernelGuard& guard) {
  const bool renamed = c.kind == ChangeKind::Renamed;
  const bool out_of_kernel = renamed && at_or_below(c.from, kernel);
  return std::any_of(guard.forced.begin(), guard.forced.end(), [&](const std::string& f) {
    if (f.empty() || f == ".") return false;
    const bool names_change = at_or_below(c.path, f) || (renamed && at_or_below(c.from, f));
    if (!names_change) return false;
    return at_or_below(f, kernel) || (!out_of_kernel && f == c.path);
  });
}

}  // namespace

bool touched_kernel_path(const Change& change, const KernelGuard& guard) {
  return std::any_of(guard.kernel_paths.begin(), guard.kernel_paths.end(),
                     [&](const std::string& k) { return reaches(change, k); });
}

std::optional<std::string> kernel_refusal(const Change& change, const KernelGuard& guard) {
  for (const auto& k : guard.kernel_paths) {
    if (!reaches(change, k) || forced_at(change, k, guard)) continue;
    return "it writes over the kernel's \"" + k +
           "\" (a kernel file or trusted skill: an overlay run that did not know it could "
           "change it); land it only with --force naming that path, after which it must be "
           "trusted again";
  }
  return std::nullopt;
}

}  // namespace kernex::workspace::detail
