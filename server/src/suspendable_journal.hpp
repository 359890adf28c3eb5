// A run's journal that stops recording once the run is suspended for an approval (cluster mode,
// and a parked run on one node): see SuspendableJournal.
#pragma once

#include <memory>
#include <string>

#include "approvals.hpp"
#include "kernex/run_journal.hpp"

namespace kernex::server {

// A run's journal that takes no result and no answer once the run is suspended for an approval:
// what a tool returned because its approval was put off (code in a REPL, a sub-run) is not its
// result, so the resumed run finds the call started and unfinished rather than a wrong answer.
class SuspendableJournal final : public RunJournal {
 public:
  SuspendableJournal(std::shared_ptr<RunJournal> inner, Approvals& approvals, std::string run_id)
      : inner_(std::move(inner)), approvals_(approvals), run_id_(std::move(run_id)) {}
  Result<std::optional<Response>> response(std::uint32_t turn) override {
    return inner_->response(turn);
  }
  Result<void> record_response(std::uint32_t turn, const Response& response) override {
    KERNEX_RETURN_IF_ERROR(check());
    return inner_->record_response(turn, response);
  }
  Result<ToolEntry> tool(const std::string& key) override { return inner_->tool(key); }
  Result<void> tool_started(const std::string& key, const ToolCall& call) override {
    KERNEX_RETURN_IF_ERROR(check());
    return inner_->tool_started(key, call);
  }
  Result<void> tool_finished(const std::string& key, const ToolResult& result) override {
    KERNEX_RETURN_IF_ERROR(check());
    return inner_->tool_finished(key, result);
  }

 private:
  Result<void> check() {
    if (approvals_.suspended(run_id_))
      return fail(ErrorCode::Cancelled, "run " + run_id_ + " waits for a person");
    return {};
  }
  std::shared_ptr<RunJournal> inner_;
  Approvals& approvals_;
  std::string run_id_;
};

}  // namespace kernex::server
