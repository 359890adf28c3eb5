// The run's budget tree: totals over every agent call, and usage per agent. Calls report what
// they use as it happens (through their trajectory: each model answer, each tool call), so a
// total used up in the middle of a parallel group stops the whole group at once.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>

#include "kernex/message.hpp"
#include "kernex/trajectory.hpp"
#include "kernex/topology/topology.hpp"

namespace kernex::topology::detail {

class Ledger {
 public:
  Ledger(AgentLimits totals, std::stop_source stop)
      : totals_(totals), stop_(std::move(stop)), start_(std::chrono::steady_clock::now()) {}

  void charge(const std::string& agent, const Usage& usage);
  void tool_call(const std::string& agent);
  // Counts what a resumed step used before the crash, without stopping anything.
  void restore(const std::string& agent, const Usage& usage);
  // "tokens", "cost", "tools", "wall_time" once a total is used up; the run's stop is requested.
  std::optional<std::string> exhausted() const;
  void exhaust(const std::string& what);  // a wall-time watchdog fired
  // What is left of each total for a call starting now (nullopt: no total).
  std::optional<std::uint64_t> tokens_left() const;
  std::optional<double> cost_left() const;
  std::optional<std::uint32_t> tools_left() const;
  std::optional<std::chrono::milliseconds> wall_left() const;

  Usage total() const;
  std::map<std::string, Usage> per_agent() const;
  std::uint32_t tool_calls() const;

 private:
  void check_locked();
  mutable std::mutex mutex_;
  AgentLimits totals_;
  std::stop_source stop_;
  std::chrono::steady_clock::time_point start_;
  Usage used_;
  std::uint32_t tools_ = 0;
  std::map<std::string, Usage> per_agent_;
  std::optional<std::string> exhausted_;
};

// One agent call's view of the run's trajectory: its events go to the run's file with the step,
// phase and agent added (its own run_start / run_end become agent_start / agent_end), and its
// usage to the ledger.
class StepTrajectory final : public Trajectory {
 public:
  StepTrajectory(std::shared_ptr<Trajectory> run, std::shared_ptr<Ledger> ledger, std::string step,
                 std::string phase, std::string agent);
  const std::string& run_id() const override;
  void record(std::string_view type, Json fields) override;

 private:
  std::shared_ptr<Trajectory> run_;
  std::shared_ptr<Ledger> ledger_;
  std::string step_, phase_, agent_;
  std::string id_;
};

}  // namespace kernex::topology::detail
