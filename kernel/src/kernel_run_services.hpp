// The kernel's RunServices: llm_query answered by the run's provider with tools off,
// llm_query_batched on a bounded pool of provider instances, rlm_query by a sub-run one level
// deeper. Everything is charged to the run tree's one budget and recorded as sub_call events.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>

#include "kernex/pricing.hpp"
#include "kernex/provider.hpp"
#include "kernex/run_services.hpp"
#include "run_tree.hpp"

namespace kernex {

class KernelRunServices final : public RunServices,
                                public std::enable_shared_from_this<KernelRunServices> {
 public:
  using ProviderFactory = std::function<Result<std::shared_ptr<Provider>>()>;
  // Runs a sub-agent for rlm_query; `parent` is these services (its tree, depth and span).
  using SubRunner = std::function<Result<std::string>(const std::string& prompt,
                                                      const std::optional<std::string>& context,
                                                      const std::shared_ptr<RunServices>& parent)>;

  struct Setup {
    std::shared_ptr<RunTree> tree;
    std::uint32_t depth = 0;
    std::string span = "0";
    std::shared_ptr<Provider> provider;  // null: deferred mode (can_query() is false)
    ProviderFactory more_providers;      // extra instances for batched queries; may be empty
    std::optional<std::string> model;    // the run's model, used when a query names none
    const PricingTable* pricing = nullptr;
    SubRunner sub_runner;  // empty: rlm_query is unsupported in this run
    std::size_t max_concurrency = 4;
    std::stop_token stop;         // the run's: no query starts once it fires
    std::string parent_code_run;  // the parent's code run that started this sub-run, if any
  };

  explicit KernelRunServices(Setup setup) : s_(std::move(setup)) {}

  std::uint32_t depth() const override { return s_.depth; }
  const std::string& span() const override { return s_.span; }
  const std::string& session() const override { return s_.tree->session(); }
  bool can_query() const override { return s_.provider != nullptr; }
#include "kernex/run_services_overrides.inc"
  void set_code_run(std::string id) override;
  std::string code_run() const;

  // The run's tools for code, bound while its loop runs: outside that window code gets none.
  struct ToolAccess {
    std::function<std::vector<ToolSpec>()> list;
    std::function<ToolResult(ToolCall, const std::string& code_run, std::size_t max_bytes)> call;
  };
  void bind_tools(ToolAccess access);
  void unbind_tools() { bind_tools({}); }
  // What the run's code submitted last, if anything.
  std::optional<Json> submitted() const;

  const std::shared_ptr<RunTree>& tree() const { return s_.tree; }
  const std::string& parent_code_run() const { return s_.parent_code_run; }

 private:
  Result<std::string> query_with(Provider& provider, const std::string& prompt,
                                 const std::optional<std::string>& model);

  // The bound tools, shared: a call from code takes a reference under the lock (no copy of the
  // functions per call) and keeps them alive while it runs, whatever unbind does meanwhile.
  std::shared_ptr<const ToolAccess> bound_tools() const;

  Setup s_;
  mutable std::mutex mu_;  // guards tools_, result_ and code_run_
  std::shared_ptr<const ToolAccess> tools_;
  std::string code_run_;
  std::optional<Json> result_;
};

}  // namespace kernex
