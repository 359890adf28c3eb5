// Where the kernel's own files are, found from the location of libkernex itself so an install
// can be moved (or unpacked under any prefix) and a build tree and an install never mix.
#pragma once

#include <filesystem>

namespace kernex::detail {

// The directory libkernex was loaded from (symlinks resolved); empty if the loader can't say.
const std::filesystem::path& library_dir();
// <libdir>/kernex/plugins beside the library: the same layout in the build tree and an install.
std::filesystem::path bundled_plugin_dir();
// The directory holding pricing.yaml: the source tree's data/ when the library is the build
// tree's, else <libdir>/<relative path to datadir>/kernex.
std::filesystem::path bundled_data_dir();

}  // namespace kernex::detail
