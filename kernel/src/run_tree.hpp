// What a root run shares with every sub-call under it: one budget (depth, tokens, cost, tool
// calls), the trajectory, and the numbering of spans in the sub-call tree.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "approval_gate.hpp"
#include "kernex/message.hpp"
#include "kernex/trajectory.hpp"
#include "kernex/config.hpp"

namespace kernex {

class RunTree {
 public:
  // `limits` are the root run's; their depth and budgets hold for the whole tree.
  RunTree(Limits limits, std::shared_ptr<Trajectory> trajectory, std::string session,
          Approver approver = {})
      : limits_(limits),
        trajectory_(std::move(trajectory)),
        session_(std::move(session)),
        approvals_(std::move(approver)) {}

  const Limits& limits() const { return limits_; }
  Trajectory* trajectory() const { return trajectory_.get(); }
  const std::shared_ptr<Trajectory>& trajectory_ptr() const { return trajectory_; }
  const std::string& session() const { return session_; }

  void charge(const Usage& usage);
  // Takes one tool call from the budget; false when none is left (nothing is taken).
  bool take_tool_call();
  Usage used() const;
  std::uint32_t tool_calls_used() const;
  // The first budget that is used up ("tokens", "cost", "tool_calls") with what was used, or none.
  std::optional<std::string> exhausted() const;
  // "S.1", "S.2", ... for the children of span S, in the order asked.
  std::string child_span(const std::string& parent);
  // The root run's approver, for every run of the tree.
  ApprovalGate& approvals() { return approvals_; }

 private:
  const Limits limits_;
  const std::shared_ptr<Trajectory> trajectory_;
  const std::string session_;
  ApprovalGate approvals_;
  mutable std::mutex mu_;
  Usage used_;
  std::uint32_t tool_calls_ = 0;
  std::map<std::string, std::uint32_t> children_;
};

}  // namespace kernex
