#include <iostream>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "kernex/redact.hpp"
#include "terminal_text.hpp"

namespace kernex::cli {

int report(const Error& error) {
  // Errors quote manifests, configs and provider bodies: keys redacted, controls made visible.
  std::cerr << "kernex: " << to_string(error.code) << ": "
            << for_terminal(redact_secrets(error.describe())) << '\n';
  return exit_code(error.code);
}

}  // namespace kernex::cli
