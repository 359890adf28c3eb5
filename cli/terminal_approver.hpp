// How the CLI asks a person about a tool call that needs approval (ask rules, hooks that ask):
// on a terminal, a prompt on stderr answered on stdin; with --approve, every such call runs;
// otherwise nothing can ask and the kernel denies the call ("needs approval").
#pragma once

#include "kernex/approval.hpp"

namespace kernex::cli {

// Unset when there is neither --approve nor a terminal on stdin.
Approver terminal_approver(bool approve_all);

// Shows the call on stderr and reads y / n / a from stdin; a stop request or end of input denies.
ApprovalDecision ask_on_terminal(const ApprovalRequest& request, std::stop_token stop);

}  // namespace kernex::cli
