// The CLI's documented exit codes and the one mapping from kernex::ErrorCode to them.
#pragma once

#include "kernex/error.hpp"

namespace kernex::cli {

enum Exit : int {
  kExitOk = 0,
  kExitInternal = 1,  // a bug, I/O failure or unsupported feature
  kExitUsage = 2,     // bad command line
  kExitConfig = 3,    // kernex.yaml, rules, skills
  kExitPlugin = 4,    // a plugin could not be found, loaded or created
  kExitProvider = 5,  // the model backend failed
  kExitLimit = 6,     // max_turns or a budget ended the run (the answer is still printed)
  kExitTool = 7,      // tool, sandbox or guardrail refusal
  kExitMemory = 8,    // memory store failure
};

constexpr int exit_code(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::Usage:
      return kExitUsage;
    case ErrorCode::Config:
    case ErrorCode::Skill:
      return kExitConfig;
    case ErrorCode::Plugin:
      return kExitPlugin;
    case ErrorCode::Provider:
      return kExitProvider;
    case ErrorCode::Limit:
    case ErrorCode::Cancelled:
      return kExitLimit;  // stopped before the end, like a budget
    case ErrorCode::Tool:
    case ErrorCode::Sandbox:
    case ErrorCode::Guardrail:
      return kExitTool;
    case ErrorCode::Memory:
      return kExitMemory;
    case ErrorCode::Io:
    case ErrorCode::Parse:
    case ErrorCode::Unsupported:
    case ErrorCode::Internal:
      return kExitInternal;
  }
  return kExitInternal;
}

inline constexpr const char* kExitCodeHelp =
    "Exit codes: 0 ok, 1 internal or I/O error, 2 usage, 3 config (kernex.yaml, rules, skills),\n"
    "4 plugin, 5 provider, 6 limit reached (max_turns or a budget; the answer is still printed),\n"
    "7 tool, sandbox or guardrail, 8 memory.";

}  // namespace kernex::cli
