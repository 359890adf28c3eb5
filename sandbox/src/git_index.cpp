#include "git_index.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <optional>
#include <string_view>

#include "kernex/files.hpp"

namespace kernex::sandbox {
namespace fs = std::filesystem;

namespace {

constexpr std::uint32_t kGitlinkMode = 0160000;

std::uint32_t be32(std::string_view b, std::size_t at) {
  return (std::uint32_t(std::uint8_t(b[at])) << 24) |
         (std::uint32_t(std::uint8_t(b[at + 1])) << 16) |
         (std::uint32_t(std::uint8_t(b[at + 2])) << 8) | std::uint32_t(std::uint8_t(b[at + 3]));
}

// `extensions.objectFormat = sha256` in the gitdir's config: 32-byte object ids, else 20.
std::size_t hash_size(const fs::path& gitdir) {
  auto config = read_regular_file_head(gitdir / "config", "git config", 1u << 20);
  if (!config) return 20;
  std::string text = *config;
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  text.erase(std::remove_if(text.begin(), text.end(), [](char c) { return c == ' ' || c == '\t'; }),
             text.end());
  return text.find("objectformat=sha256") != std::string::npos ? 32 : 20;
}

// The entries of one index file; the hex id of its shared index when it is a split index's.
bool parse_index(std::string_view b, std::size_t hash, std::vector<std::string>& out,
                 std::optional<std::string>& shared) {
  if (b.size() < 12 + hash || b.substr(0, 4) != "DIRC") return false;
  const std::uint32_t version = be32(b, 4);
  if (version < 2 || version > 4) return false;
  const std::uint32_t count = be32(b, 8);
  const std::size_t end = b.size() - hash;  // the trailing checksum
  std::size_t at = 12;
  std::string path;  // v4: each path is the previous one, cut and extended
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::size_t fixed = 40 + hash + 2;
    if (at + fixed > end) return false;
    const std::uint32_t mode = be32(b, at + 24);
    const std::uint16_t flags = static_cast<std::uint16_t>((std::uint8_t(b[at + 40 + hash]) << 8) |
                                                           std::uint8_t(b[at + 41 + hash]));
    std::size_t name = at + fixed + ((version >= 3 && (flags & 0x4000)) ? 2 : 0);
    if (version == 4) {
      std::uint64_t strip = 0;  // git's offset varint
      if (name >= end) return false;
      std::uint8_t c = std::uint8_t(b[name++]);
      strip = c & 0x7f;
      while (c & 0x80) {
        if (name >= end || strip > path.size()) return false;
        c = std::uint8_t(b[name++]);
        strip = ((strip + 1) << 7) | (c & 0x7f);
      }
      if (strip > path.size()) return false;
      path.resize(path.size() - strip);
    } else {
      path.clear();
    }
    const std::size_t nul = b.find('\0', name);
    if (nul == std::string_view::npos || nul >= end) return false;
    path.append(b.substr(name, nul - name));
    if ((mode & 0170000) == kGitlinkMode) out.push_back(path);
    at = version == 4 ? nul + 1 : at + ((nul - at + 8) & ~std::size_t{7});
  }
  // Extensions: a 4-byte signature and a 4-byte size each; "link" names the shared index.
  while (at + 8 <= end) {
    const std::string_view sig = b.substr(at, 4);
    const std::uint32_t size = be32(b, at + 4);
    if (size > end - at - 8) return false;
    if (sig == "link" && size >= hash) {
      static constexpr char kHex[] = "0123456789abcdef";
      std::string hex;
      for (std::size_t k = 0; k < hash; ++k) {
        const auto byte = std::uint8_t(b[at + 8 + k]);
        hex += kHex[byte >> 4];
        hex += kHex[byte & 15];
      }
      shared = hex;
    }
    at += 8 + size;
  }
  return true;
}

}  // namespace

Gitlinks read_gitlinks(const fs::path& gitdir) {
  Gitlinks out;
  struct stat st {};
  if (::lstat((gitdir / "index").c_str(), &st) != 0) return out;
  const std::size_t hash = hash_size(gitdir);
  std::optional<std::string> shared;
  for (fs::path file = gitdir / "index"; !file.empty();) {
    auto bytes = read_regular_file_head(file, "git index", kMaxGitIndexBytes + 1);
    std::optional<std::string> next;
    if (!bytes || bytes->size() > kMaxGitIndexBytes ||
        !parse_index(*bytes, hash, out.paths, next)) {
      out.unreadable = true;
      return out;
    }
    // A shared index has no "link" of its own; one link is followed, never a chain.
    file = (next && !shared) ? gitdir / ("sharedindex." + *next) : fs::path();
    shared = next;
  }
  std::sort(out.paths.begin(), out.paths.end());
  out.paths.erase(std::unique(out.paths.begin(), out.paths.end()), out.paths.end());
  return out;
}

}  // namespace kernex::sandbox
