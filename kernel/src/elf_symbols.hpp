// Whether a file is a shared object exporting a symbol, read without loading it.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace kernex::detail {

// Looks `symbol` up among the defined symbols of the file's dynamic symbol table (.dynsym: what
// dlsym searches), from a read-only mapping with every offset bounds-checked: the file is
// untrusted until it is loaded, and no code of it runs here. Returns the problem ("not a shared
// library (...)", "no <symbol> symbol; ..."), or nullopt when the symbol is there.
std::optional<std::string> exported_symbol_problem(const std::filesystem::path& file,
                                                   std::string_view symbol);

}  // namespace kernex::detail
