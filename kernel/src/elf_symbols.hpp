// Whether a file is a shared object exporting a symbol, read without loading it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kernex::detail {

// Looks `symbol` up among the defined symbols of the file's dynamic symbol table (.dynsym: what
// dlsym searches), from a read-only mapping with every offset bounds-checked: the file is
// untrusted until it is loaded, and no code of it runs here. Returns the problem ("not a shared
// library (...)", "no <symbol> symbol; ..."), or nullopt when the symbol is there.
std::optional<std::string> exported_symbol_problem(const std::filesystem::path& file,
                                                   std::string_view symbol);

// A plugin descriptor as the file holds it, read with the same bounds checks and without running
// or mapping any of the file's code. Strings are nullopt where the descriptor's pointer is null.
struct FileDescriptor {
  std::uint32_t abi_version = 0;
  std::uint32_t kind = 0;
  std::optional<std::string> name, version, description;
  std::vector<bool> exported;  // for each symbol asked about: defined in .dynsym
};

// The descriptor `symbol` names, and which of `also` the file exports; nullopt when it cannot be
// read without loading the file (its pointers relocated in a way this reader does not follow, a
// packed relocation table, a layout it does not expect): the caller then loads the file instead.
// Relative relocations are followed on x86-64 and AArch64 only.
std::optional<FileDescriptor> read_descriptor(const std::filesystem::path& file,
                                              std::string_view symbol,
                                              std::span<const std::string_view> also);

}  // namespace kernex::detail
