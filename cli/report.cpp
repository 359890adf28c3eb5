#include <iostream>

#include "commands.hpp"
#include "exit_codes.hpp"

namespace kernex::cli {

int report(const Error& error) {
  std::cerr << "kernex: " << to_string(error.code) << ": " << error.describe() << '\n';
  return exit_code(error.code);
}

}  // namespace kernex::cli
