// Reads only the ELF header, the section headers, .dynsym and its string table (a few KiB), where
// boost::dll::library_info read every name of .symtab into strings: with debug info that was a
// third of booting the kernel with every plugin.
#include "elf_symbols.hpp"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace kernex::detail {
namespace {

using Ehdr = ElfW(Ehdr);
using Shdr = ElfW(Shdr);
using Sym = ElfW(Sym);

// A read-only mapping of a whole file, unmapped on destruction.
class Mapping {
 public:
  explicit Mapping(const std::filesystem::path& file) {
    // O_NONBLOCK: a FIFO put where the file was checked must not hang the open.
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      error_ = std::strerror(errno);
      return;
    }
    struct stat st {};
    if (::fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
      error_ = "not a regular file";
    } else if (st.st_size > 0) {
      void* p =
          ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
      if (p != MAP_FAILED) {
        data_ = static_cast<const unsigned char*>(p);
        size_ = static_cast<std::size_t>(st.st_size);
      } else {
        error_ = std::strerror(errno);
      }
    } else {
      error_ = "empty file";
    }
    ::close(fd);
  }
  ~Mapping() {
    if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), size_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  const std::string& error() const { return error_; }
  // The `count` objects of type T at `offset`, or nullptr when they do not fit in the file.
  template <class T>
  const T* at(std::uint64_t offset, std::uint64_t count = 1) const {
    if (offset > size_ || count > (size_ - offset) / sizeof(T)) return nullptr;
    if (offset % alignof(T) != 0) return nullptr;
    return reinterpret_cast<const T*>(data_ + offset);
  }
  const char* chars(std::uint64_t offset) const { return at<char>(offset); }

 private:
  const unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
  std::string error_;
};

std::string not_a_library(std::string_view why) {
  return "not a shared library (" + std::string(why) + ")";
}

bool native_header(const Ehdr& h) {
  constexpr unsigned char kClass = sizeof(void*) == 8 ? ELFCLASS64 : ELFCLASS32;
  constexpr unsigned char kData =
      std::endian::native == std::endian::little ? ELFDATA2LSB : ELFDATA2MSB;
  return std::memcmp(h.e_ident, ELFMAG, SELFMAG) == 0 && h.e_ident[EI_CLASS] == kClass &&
         h.e_ident[EI_DATA] == kData && h.e_type == ET_DYN;
}

}  // namespace

std::optional<std::string> exported_symbol_problem(const std::filesystem::path& file,
                                                   std::string_view symbol) {
  const Mapping map(file);
  if (!map.error().empty()) return not_a_library(map.error());
  const Ehdr* header = map.at<Ehdr>(0);
  if (header == nullptr || !native_header(*header))
    return not_a_library("not a native ELF shared object");
  if (header->e_shentsize != sizeof(Shdr)) return not_a_library("bad section header size");
  const Shdr* sections = map.at<Shdr>(header->e_shoff, header->e_shnum);
  if (sections == nullptr) return not_a_library("section headers past the end of the file");

  for (std::size_t i = 0; i < header->e_shnum; ++i) {
    const Shdr& dynsym = sections[i];
    if (dynsym.sh_type != SHT_DYNSYM) continue;
    if (dynsym.sh_link >= header->e_shnum) return not_a_library("bad .dynsym string table");
    const Shdr& strtab = sections[dynsym.sh_link];
    const Sym* symbols = map.at<Sym>(dynsym.sh_offset, dynsym.sh_size / sizeof(Sym));
    const char* names = map.at<char>(strtab.sh_offset, strtab.sh_size);
    if (symbols == nullptr || names == nullptr) return not_a_library(".dynsym past the end");
    for (std::size_t s = 0; s < dynsym.sh_size / sizeof(Sym); ++s) {
      const Sym& sym = symbols[s];
      if (sym.st_shndx == SHN_UNDEF || sym.st_name >= strtab.sh_size) continue;
      const std::size_t room = strtab.sh_size - sym.st_name;
      const char* name = names + sym.st_name;
      if (::strnlen(name, room) == symbol.size() &&
          std::memcmp(name, symbol.data(), symbol.size()) == 0)
        return std::nullopt;
    }
  }
  return "no " + std::string(symbol) + " symbol; not a kernex plugin";
}

}  // namespace kernex::detail
