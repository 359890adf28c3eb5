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

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernex/plugin.hpp"

namespace kernex::detail {
namespace {

using Ehdr = ElfW(Ehdr);
using Shdr = ElfW(Shdr);
using Sym = ElfW(Sym);
using Rela = ElfW(Rela);
using Word = ElfW(Addr);

#if defined(__x86_64__)
constexpr std::uint32_t kRelative = R_X86_64_RELATIVE;
#elif defined(__aarch64__)
constexpr std::uint32_t kRelative = R_AARCH64_RELATIVE;
#else
constexpr std::uint32_t kRelative = 0;  // not followed: every plugin is then loaded to be read
#endif
// ELF64_R_TYPE or ELF32_R_TYPE, as this process's class.
constexpr std::uint32_t relocation_type(std::uint64_t info) {
  return sizeof(void*) == 8 ? static_cast<std::uint32_t>(info & 0xffffffff)
                            : static_cast<std::uint32_t>(info & 0xff);
}
#ifndef SHT_RELR
#define SHT_RELR 19
#endif

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

// The file's section headers, once its ELF header says it is a native shared object.
struct Sections {
  const Shdr* table = nullptr;
  std::size_t count = 0;
  std::string problem;  // set when the file is not one
};

Sections sections_of(const Mapping& map) {
  if (!map.error().empty()) return {.problem = not_a_library(map.error())};
  const Ehdr* header = map.at<Ehdr>(0);
  if (header == nullptr || !native_header(*header))
    return {.problem = not_a_library("not a native ELF shared object")};
  if (header->e_shentsize != sizeof(Shdr))
    return {.problem = not_a_library("bad section header size")};
  const Shdr* table = map.at<Shdr>(header->e_shoff, header->e_shnum);
  if (table == nullptr)
    return {.problem = not_a_library("section headers past the end of the file")};
  return {.table = table, .count = header->e_shnum, .problem = {}};
}

// Calls visit(name, symbol) for every defined symbol of .dynsym; a problem when it is malformed.
template <class Visit>
std::optional<std::string> each_dynamic_symbol(const Mapping& map, const Sections& sections,
                                               Visit&& visit) {
  for (std::size_t i = 0; i < sections.count; ++i) {
    const Shdr& dynsym = sections.table[i];
    if (dynsym.sh_type != SHT_DYNSYM) continue;
    if (dynsym.sh_link >= sections.count) return not_a_library("bad .dynsym string table");
    const Shdr& strtab = sections.table[dynsym.sh_link];
    const Sym* symbols = map.at<Sym>(dynsym.sh_offset, dynsym.sh_size / sizeof(Sym));
    const char* names = map.at<char>(strtab.sh_offset, strtab.sh_size);
    if (symbols == nullptr || names == nullptr) return not_a_library(".dynsym past the end");
    for (std::size_t s = 0; s < dynsym.sh_size / sizeof(Sym); ++s) {
      const Sym& sym = symbols[s];
      if (sym.st_shndx == SHN_UNDEF || sym.st_name >= strtab.sh_size) continue;
      const char* name = names + sym.st_name;
      visit(std::string_view(name, ::strnlen(name, strtab.sh_size - sym.st_name)), sym);
    }
  }
  return std::nullopt;
}

// Where `size` bytes at virtual address `vaddr` are in the file, and how many bytes of their
// section follow them there.
struct Place {
  std::uint64_t offset = 0, room = 0;
};

std::optional<Place> place_of(const Sections& sections, std::uint64_t vaddr, std::uint64_t size) {
  for (std::size_t i = 0; i < sections.count; ++i) {
    const Shdr& s = sections.table[i];
    if ((s.sh_flags & SHF_ALLOC) == 0 || s.sh_type == SHT_NOBITS || vaddr < s.sh_addr) continue;
    const std::uint64_t into = vaddr - s.sh_addr;
    if (into > s.sh_size || size > s.sh_size - into) continue;
    return Place{s.sh_offset + into, s.sh_size - into};
  }
  return std::nullopt;
}

// A pointer-sized slot of the descriptor and what the loader would store in it.
struct Slot {
  std::uint64_t vaddr = 0;
  int relocations = 0;
  bool relative = true;
  std::uint64_t target = 0;
};

// Fills each slot from the dynamic relocation tables; false when one is a kind not followed.
// A plugin has tens of thousands of relocations (hundreds of thousands built with ASan) and the
// slots sit within a few words, so an entry outside their span is passed over with two compares.
bool relocate(const Mapping& map, const Sections& sections, std::span<Slot> slots) {
  std::uint64_t lowest = UINT64_MAX, highest = 0;
  for (const Slot& slot : slots) {
    lowest = std::min(lowest, slot.vaddr);
    highest = std::max(highest, slot.vaddr);
  }
  for (std::size_t i = 0; i < sections.count; ++i) {
    const Shdr& table = sections.table[i];
    if ((table.sh_flags & SHF_ALLOC) == 0) continue;
    if (table.sh_type == SHT_REL || table.sh_type == SHT_RELR) return false;
    if (table.sh_type != SHT_RELA) continue;
    const std::size_t count = table.sh_size / sizeof(Rela);
    const Rela* entries = map.at<Rela>(table.sh_offset, count);
    if (entries == nullptr) return false;
    for (std::size_t e = 0; e < count; ++e) {
      if (entries[e].r_offset < lowest || entries[e].r_offset > highest) continue;
      for (Slot& slot : slots) {
        if (entries[e].r_offset != slot.vaddr) continue;
        ++slot.relocations;
        slot.relative = relocation_type(entries[e].r_info) == kRelative && kRelative != 0;
        slot.target = static_cast<std::uint64_t>(entries[e].r_addend);
      }
    }
  }
  return true;
}

// The string a relocated slot points at: nullopt in `out` for a null pointer; false when the
// pointer cannot be followed in the file.
bool string_at(const Mapping& map, const Sections& sections, const Slot& slot, Word stored,
               std::optional<std::string>& out) {
  if (slot.relocations > 1 || !slot.relative) return false;
  if (slot.relocations == 0) {
    out = std::nullopt;
    return stored == 0;  // a pointer nothing relocates is null, or not one this reader follows
  }
  const auto place = place_of(sections, slot.target, 1);
  const char* text = place ? map.chars(place->offset) : nullptr;
  if (text == nullptr) return false;
  const std::size_t length = ::strnlen(text, place->room);
  if (length == place->room) return false;  // not terminated inside its section
  out = std::string(text, length);
  return true;
}

}  // namespace

std::optional<std::string> exported_symbol_problem(const std::filesystem::path& file,
                                                   std::string_view symbol) {
  const Mapping map(file);
  const Sections sections = sections_of(map);
  if (!sections.problem.empty()) return sections.problem;
  bool found = false;
  if (auto problem = each_dynamic_symbol(
          map, sections, [&](std::string_view name, const Sym&) { found |= name == symbol; }))
    return problem;
  if (found) return std::nullopt;
  return "no " + std::string(symbol) + " symbol; not a kernex plugin";
}

// `symbol` is a BOOST_DLL_ALIAS: a pointer to the descriptor, itself relocated at load.
std::optional<FileDescriptor> read_descriptor(const std::filesystem::path& file,
                                              std::string_view symbol,
                                              std::span<const std::string_view> also) {
  const Mapping map(file);
  const Sections sections = sections_of(map);
  if (!sections.problem.empty()) return std::nullopt;
  FileDescriptor out;
  out.exported.assign(also.size(), false);
  Slot alias;
  int aliases = 0;
  auto visit = [&](std::string_view name, const Sym& sym) {
    for (std::size_t i = 0; i < also.size(); ++i)
      out.exported[i] = out.exported[i] || name == also[i];
    if (name == symbol && sym.st_size == sizeof(Word)) alias.vaddr = sym.st_value, ++aliases;
  };
  if (each_dynamic_symbol(map, sections, visit) || aliases != 1) return std::nullopt;
  if (!relocate(map, sections, std::span(&alias, 1)) || alias.relocations != 1 || !alias.relative)
    return std::nullopt;
  const auto place = place_of(sections, alias.target, sizeof(PluginDescriptor));
  const auto* bytes =
      place ? map.at<unsigned char>(place->offset, sizeof(PluginDescriptor)) : nullptr;
  if (bytes == nullptr) return std::nullopt;
  std::memcpy(&out.abi_version, bytes + offsetof(PluginDescriptor, abi_version), 4);
  std::memcpy(&out.kind, bytes + offsetof(PluginDescriptor, kind), 4);
  constexpr std::size_t kStrings[] = {offsetof(PluginDescriptor, name),
                                      offsetof(PluginDescriptor, version),
                                      offsetof(PluginDescriptor, description)};
  Slot slots[3];
  for (std::size_t i = 0; i < 3; ++i) slots[i].vaddr = alias.target + kStrings[i];
  if (!relocate(map, sections, slots)) return std::nullopt;
  std::optional<std::string>* fields[] = {&out.name, &out.version, &out.description};
  for (std::size_t i = 0; i < 3; ++i) {
    Word stored = 0;
    std::memcpy(&stored, bytes + kStrings[i], sizeof(Word));
    if (!string_at(map, sections, slots[i], stored, *fields[i])) return std::nullopt;
  }
  return out;
}

}  // namespace kernex::detail
