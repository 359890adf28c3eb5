// Taking, writing and reading the manifest of the real tree.
#include "manifest.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>

#include "beneath.hpp"

namespace kernex::workspace::detail {

namespace {

constexpr std::string_view kHeader = "kernex-overlay-manifest 1\n";

// The manifest's letter for each EntryType, indexed by its value ("none" never written).
constexpr char kTypeLetters[] = {'-', 'f', 'l', 'd', 'o'};

char type_letter(EntryType type) { return kTypeLetters[static_cast<std::size_t>(type)]; }

bool type_from_letter(char letter, EntryType& type) {
  for (std::size_t i = 1; i < sizeof kTypeLetters; ++i) {
    if (kTypeLetters[i] != letter) continue;
    type = static_cast<EntryType>(i);
    return true;
  }
  return false;
}

struct Scan {
  const OverlayLimits& limits;
  std::string root;
  dev_t dev = 0;
  std::size_t budget = 0;
  Manifest out;
};

Result<void> scan_dir(Scan& scan, int dir, const std::string& rel, std::size_t depth) {
  if (depth > scan.limits.max_depth)
    return fail(ErrorCode::Limit, label("real tree", scan.root, rel) + " is deeper than " +
                                      std::to_string(scan.limits.max_depth) + " directories");
  const std::size_t before = scan.budget;
  auto entries = list_dir(dir, label("real tree", scan.root, rel), &scan.budget);
  if (!entries) {
    if (entries.error().code == ErrorCode::Limit)
      return fail(ErrorCode::Limit, "real tree \"" + scan.root + "\" has more than " +
                                        std::to_string(scan.limits.max_entries) +
                                        " entries (files, symlinks, directories): the cap of an "
                                        "overlay manifest (OverlayLimits::max_entries)");
    return std::unexpected(entries.error());
  }
  (void)before;
  for (const DirEntry& e : *entries) {
    const std::string path = join(rel, e.name);
    scan.out.emplace(path, entry_of(e.st));
    if (!S_ISDIR(e.st.st_mode) || e.st.st_dev != scan.dev) continue;
    const int fd = ::openat(dir, e.name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
      return fail(ErrorCode::Io,
                  label("real tree", scan.root, path) + ": cannot open: " + errno_text(errno));
    const Fd child(fd);
    KERNEX_RETURN_IF_ERROR(scan_dir(scan, child.get(), path, depth + 1));
  }
  return {};
}

void escape_into(std::string& out, std::string_view path) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (const char c : path) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\\') {
      out += "\\\\";
    } else if (u < 0x20 || u == 0x7f) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool unescape(std::string_view in, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '\\') {
      out += in[i];
      continue;
    }
    if (i + 1 < in.size() && in[i + 1] == '\\') {
      out += '\\';
      ++i;
    } else if (i + 3 < in.size() && in[i + 1] == 'x' && hex_digit(in[i + 2]) >= 0 &&
               hex_digit(in[i + 3]) >= 0) {
      out += static_cast<char>(hex_digit(in[i + 2]) * 16 + hex_digit(in[i + 3]));
      i += 3;
    } else {
      return false;
    }
  }
  return true;
}

template <class T>
bool take_number(std::string_view& line, T& value, int base = 10) {
  const std::size_t space = line.find(' ');
  if (space == std::string_view::npos) return false;
  const auto [ptr, ec] = std::from_chars(line.data(), line.data() + space, value, base);
  if (ec != std::errc() || ptr != line.data() + space) return false;
  line.remove_prefix(space + 1);
  return true;
}

bool parse_line(std::string_view line, std::string& path, ManifestEntry& e) {
  if (line.size() < 2 || line[1] != ' ' || !type_from_letter(line[0], e.type)) return false;
  line.remove_prefix(2);
  if (!take_number(line, e.mode, 8) || e.mode > 07777 || !take_number(line, e.size) ||
      !take_number(line, e.mtime_ns) || !take_number(line, e.ino)) {
    return false;
  }
  std::vector<std::string_view> parts;
  return unescape(line, path) && split_relative(path, parts);
}

}  // namespace

EntryType type_of(mode_t mode) {
  if (S_ISREG(mode)) return EntryType::File;
  if (S_ISLNK(mode)) return EntryType::Symlink;
  if (S_ISDIR(mode)) return EntryType::Dir;
  return EntryType::Other;
}

ManifestEntry entry_of(const struct stat& st) {
  return ManifestEntry{
      type_of(st.st_mode), static_cast<std::uint32_t>(st.st_mode & 07777),
      static_cast<std::uint64_t>(st.st_size),
      static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
      static_cast<std::uint64_t>(st.st_ino)};
}

Result<Manifest> scan_tree(const std::string& root, const OverlayLimits& limits) {
  KERNEX_ASSIGN_OR_RETURN(Fd fd, open_root(root, "real tree"));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    return fail(ErrorCode::Io, label("real tree", root, "") + ": fstat: " + errno_text(errno));
  Scan scan{limits, root, st.st_dev, limits.max_entries, {}};
  KERNEX_RETURN_IF_ERROR(scan_dir(scan, fd.get(), "", 0));
  return std::move(scan.out);
}

std::string format_manifest(const Manifest& manifest) {
  std::string out(kHeader);
  out.reserve(manifest.size() * 64);
  for (const auto& [path, e] : manifest) {
    char mode[8];
    const auto end = std::to_chars(mode, mode + sizeof mode, e.mode, 8).ptr;
    out += type_letter(e.type);
    out += ' ';
    out.append(mode, end);
    out += ' ' + std::to_string(e.size) + ' ' + std::to_string(e.mtime_ns) + ' ' +
           std::to_string(e.ino) + ' ';
    escape_into(out, path);
    out += '\n';
  }
  return out;
}

Result<Manifest> parse_manifest(std::string_view text, const std::string& where,
                                const OverlayLimits& limits) {
  if (!text.starts_with(kHeader))
    return fail(ErrorCode::Parse, where + ": not a kernex overlay manifest (version 1)");
  text.remove_prefix(kHeader.size());
  Manifest out;
  std::size_t line_no = 1;
  std::string path;
  while (!text.empty()) {
    ++line_no;
    const std::size_t nl = text.find('\n');
    if (nl == std::string_view::npos)
      return fail(ErrorCode::Parse, where + ": line " + std::to_string(line_no) + " is cut short");
    ManifestEntry e;
    if (!parse_line(text.substr(0, nl), path, e))
      return fail(ErrorCode::Parse, where + ": line " + std::to_string(line_no) +
                                        " is not \"<f|l|d|o> <mode> <size> <mtime> <inode> "
                                        "<path>\"");
    if (out.size() >= limits.max_entries)
      return fail(ErrorCode::Limit,
                  where + " has more than " + std::to_string(limits.max_entries) + " entries");
    out.insert_or_assign(path, e);
    text.remove_prefix(nl + 1);
  }
  return out;
}

Result<void> write_file_atomic(int dir, const std::string& name, std::string_view content,
                               const std::string& where) {
  const std::string temp = temp_name(name);
  Fd fd(::openat(dir, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.get() < 0) return fail(ErrorCode::Io, where + ": cannot create: " + errno_text(errno));
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd.get(), content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::unlinkat(dir, temp.c_str(), 0);
      return fail(ErrorCode::Io, where + ": write: " + errno_text(err));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd.get()) != 0 || ::renameat(dir, temp.c_str(), dir, name.c_str()) != 0) {
    const int err = errno;
    ::unlinkat(dir, temp.c_str(), 0);
    return fail(ErrorCode::Io, where + ": " + errno_text(err));
  }
  ::fsync(dir);
  return {};
}

}  // namespace kernex::workspace::detail
