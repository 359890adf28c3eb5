#include "terminal_approver.hpp"

#include <termios.h>
#include <unistd.h>

#include <iostream>

#include "terminal_input.hpp"
#include "terminal_text.hpp"

namespace kernex::cli {
namespace {

constexpr std::size_t kShownArgumentsLen = 2000;

void show(const ApprovalRequest& request) {
  std::string args = request.call.arguments.dump(-1, ' ', false, Json::error_handler_t::replace);
  // Long arguments: their start and their end, where padding would push the dangerous part.
  if (args.size() > kShownArgumentsLen) {
    const std::size_t total = args.size();
    args = args.substr(0, kShownArgumentsLen / 2) + " ... (" + std::to_string(total) +
           " characters in all) ... " + args.substr(total - kShownArgumentsLen / 2);
  }
  std::cerr << "\nkernex: approval needed: " << for_terminal(request.call.name) << ' '
            << for_terminal(args) << "\n  why: " << for_terminal(request.reason) << '\n';
}

std::optional<ApprovalVerdict> parse_answer(std::string answer) {
  for (char& c : answer) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  while (!answer.empty() && (answer.back() == ' ' || answer.back() == '\r')) answer.pop_back();
  while (!answer.empty() && answer.front() == ' ') answer.erase(0, 1);
  if (answer == "y" || answer == "yes") return ApprovalVerdict::Approve;
  if (answer == "a" || answer == "always") return ApprovalVerdict::Always;
  if (answer == "n" || answer == "no") return ApprovalVerdict::Deny;
  return std::nullopt;
}

}  // namespace

ApprovalDecision ask_on_terminal(const ApprovalRequest& request, std::stop_token stop) {
  show(request);
  // What was typed before the question is not an answer to it.
  if (::isatty(STDIN_FILENO) == 1) ::tcflush(STDIN_FILENO, TCIFLUSH);
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::cerr << "approve? [y]es / [n]o / [a]lways for this session: " << std::flush;
    auto line = read_line(STDIN_FILENO, stop);
    if (!line) {
      std::cerr << '\n';
      return ApprovalDecision::deny(stop.stop_requested() ? "the run was stopped"
                                                          : "no answer (end of input)");
    }
    if (auto verdict = parse_answer(*line)) {
      if (*verdict == ApprovalVerdict::Deny) return ApprovalDecision::deny("the user said no");
      return ApprovalDecision{*verdict, std::nullopt, {}};
    }
    std::cerr << "please answer y, n or a\n";
  }
  return ApprovalDecision::deny("no clear answer");
}

Approver terminal_approver(bool approve_all) {
  if (approve_all) {
    return [](const ApprovalRequest& request, std::stop_token) {
      std::cerr << "kernex: approved by --approve: " << for_terminal(request.call.name) << " ("
                << for_terminal(request.reason) << ")\n";
      return ApprovalDecision::approve();
    };
  }
  if (!stdin_is_terminal()) return {};
  return ask_on_terminal;
}

}  // namespace kernex::cli
