// The changes as one patch in git's format (no index lines): a "diff --git" header per path,
// mode, new/deleted and rename lines, then unified hunks; binary or oversized files are named.
#include <cstdio>

#include "kernex/workspace/unified_diff.hpp"
#include "overlay_state.hpp"

namespace kernex::workspace::detail {

namespace {

// git's quoting: a path with control characters, '"' or '\\' is written in C style.
std::string quote_path(std::string_view prefix, std::string_view path) {
  const std::string full = std::string(prefix) + std::string(path);
  bool plain = true;
  for (const char c : full) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || c == '"' || c == '\\') plain = false;
  }
  if (plain) return full;
  std::string out = "\"";
  for (const char c : full) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\%03o", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string git_mode(EntryType type, std::uint32_t mode) {
  if (type == EntryType::Symlink) return "120000";
  char buf[16];
  std::snprintf(buf, sizeof buf, "100%03o", mode & 0777);
  return buf;
}

struct Side {
  bool present = false;
  bool large = false;
  std::string text;
};

bool is_binary(const std::string& text) {
  return text.find('\0', 0) < std::min<std::size_t>(text.size(), 8000);
}

Result<Side> read_side(const Layers& layers, int root, const std::string& rel, EntryType type,
                       const std::string& where) {
  Side side{true, false, {}};
  if (type == EntryType::Symlink) {
    KERNEX_ASSIGN_OR_RETURN(side.text, read_link_beneath(root, rel, where));
    return side;
  }
  KERNEX_ASSIGN_OR_RETURN(Fd fd, open_regular_beneath(root, rel, where, nullptr));
  auto text = read_all(fd.get(), layers.limits->max_diff_bytes, where);
  if (!text && text.error().code == ErrorCode::Limit) {
    side.large = true;
    return side;
  }
  if (!text) return std::unexpected(text.error());
  side.text = std::move(*text);
  return side;
}

Result<Side> old_side(const Layers& layers, const Planned& p) {
  const std::string& path = p.change.kind == ChangeKind::Renamed ? p.change.from : p.change.path;
  if (p.change.old_type != EntryType::File && p.change.old_type != EntryType::Symlink)
    return Side{};
  return read_side(layers, layers.lower, path, p.change.old_type, layers.in_lower(path));
}

Result<Side> new_side(const Layers& layers, const Planned& p) {
  if (!p.next || (p.next->type != EntryType::File && p.next->type != EntryType::Symlink))
    return Side{};
  const int root = p.next->from_lower ? layers.lower : layers.upper;
  const std::string where =
      p.next->from_lower ? layers.in_lower(p.next->source) : layers.in_upper(p.next->source);
  return read_side(layers, root, p.next->source, p.next->type, where);
}

// "--- a/x\n+++ b/x\n" and the hunks, or the line naming a binary or oversized pair.
void put_content(std::string& out, const std::string& a_name, const std::string& b_name,
                 const Side& a, const Side& b) {
  if (a.large || b.large) {
    out += "Files " + a_name + " and " + b_name + " differ (larger than the diff cap)\n";
    return;
  }
  if (is_binary(a.text) || is_binary(b.text)) {
    if (a.text != b.text) out += "Binary files " + a_name + " and " + b_name + " differ\n";
    return;
  }
  const std::string hunks = unified_hunks(a.text, b.text);
  if (hunks.empty()) return;
  out += "--- " + a_name + "\n+++ " + b_name + "\n" + hunks;
}

Result<void> put_change(std::string& out, const Layers& layers, const Planned& p) {
  const Change& c = p.change;
  const std::string from = c.kind == ChangeKind::Renamed ? c.from : c.path;
  const std::string a = quote_path("a/", from), b = quote_path("b/", c.path);
  const bool old_shown = c.old_type == EntryType::File || c.old_type == EntryType::Symlink;
  const bool new_shown = c.new_type == EntryType::File || c.new_type == EntryType::Symlink;
  KERNEX_ASSIGN_OR_RETURN(Side old_s, old_side(layers, p));
  KERNEX_ASSIGN_OR_RETURN(Side new_s, new_side(layers, p));
  const bool delete_then_add = c.kind == ChangeKind::TypeChanged;
  if (old_shown && (c.kind == ChangeKind::Deleted || delete_then_add)) {
    out += "diff --git " + a + " " + quote_path("b/", from) + "\n";
    out += "deleted file mode " + git_mode(c.old_type, c.old_mode) + "\n";
    put_content(out, a, "/dev/null", old_s, Side{});
  }
  if (new_shown && (c.kind == ChangeKind::Added || delete_then_add)) {
    out += "diff --git " + quote_path("a/", c.path) + " " + b + "\n";
    out += "new file mode " + git_mode(c.new_type, c.new_mode) + "\n";
    put_content(out, "/dev/null", b, Side{}, new_s);
  }
  if (c.kind != ChangeKind::Modified && c.kind != ChangeKind::ModeChanged &&
      c.kind != ChangeKind::Renamed)
    return {};
  if (c.kind == ChangeKind::ModeChanged && !new_shown) return {};  // a directory's mode
  out += "diff --git " + a + " " + b + "\n";
  if (git_mode(c.old_type, c.old_mode) != git_mode(c.new_type, c.new_mode))
    out += "old mode " + git_mode(c.old_type, c.old_mode) + "\nnew mode " +
           git_mode(c.new_type, c.new_mode) + "\n";
  if (c.kind == ChangeKind::Renamed)
    out += "similarity index 100%\nrename from " + quote_path("", c.from) + "\nrename to " +
           quote_path("", c.path) + "\n";
  if (c.kind == ChangeKind::Modified) put_content(out, a, b, old_s, new_s);
  return {};
}

}  // namespace

Result<std::string> diff_changes(const Layers& layers, const std::vector<Planned>& changes) {
  std::string out;
  for (const Planned& p : changes) KERNEX_RETURN_IF_ERROR(put_change(out, layers, p));
  return out;
}

}  // namespace kernex::workspace::detail
