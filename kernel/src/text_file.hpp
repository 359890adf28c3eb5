// Reading a whole data file (rules, prices) with an error that names it.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "kernex/error.hpp"

namespace kernex {

// `what` names the kind of file in errors, e.g. "pricing file".
inline Result<std::string> read_text_file(const std::filesystem::path& path,
                                          std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return fail(ErrorCode::Io, "cannot open " + std::string(what) + " '" + path.string() + "'");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad())
    return fail(ErrorCode::Io, "cannot read " + std::string(what) + " '" + path.string() + "'");
  return std::move(buf).str();
}

}  // namespace kernex
