// `kernex chat`: the terminal as a channel. Each line typed is a turn of the current session;
// answers stream as they come; /new starts a fresh session, /history shows this one, approvals
// are asked at the prompt; Ctrl-C stops the running turn (not the program).
#pragma once

#include <atomic>
#include <mutex>
#include <set>
#include <stop_token>
#include <string>

#include "kernex/channel.hpp"

namespace kernex::cli {

class TerminalChannel : public Channel {
 public:
  Result<void> run(ChannelHost& host, std::stop_token stop) override;
  // Ctrl-C: stops the running turn; false when none runs.
  bool interrupt_turn();

 private:
  Result<void> turn(ChannelHost& host, const std::string& text);
  void show_history(ChannelHost& host);
  void new_session(ChannelHost& host);
  ApprovalDecision approve(const ApprovalRequest& request, std::stop_token stop);

  std::string session_;
  std::mutex mu_;
  std::stop_source turn_stop_;
  bool turn_running_ = false;
  std::set<std::string> always_;  // tools approved for the whole session
};

}  // namespace kernex::cli
