// bench/repl's figures for tools called from code (issue 20), each beside its baseline:
//   tool call from code   server-everything's `echo` (npm, sandboxed, over MCP) called from
//                         eval_code  vs  the same tool called by the kernel for the model; the
//                         hop alone (a refused call) beside its floor, a bare python3 pipe echo
//   scenario tokens       what the model is sent in tests/support/code_tools_scenario.hpp's task
//                         done with code that calls the tools  vs  with direct tool calls
// Both need the npm packages (cmake/KernexNpm.cmake); without node and npm they say so.
#pragma once

namespace kernex::bench {

// `calls`: tool calls per round and way (5 rounds, alternating).
void code_tools_benches(int calls);

}  // namespace kernex::bench
