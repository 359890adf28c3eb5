#include "kernel_run_services.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

namespace kernex {
namespace {

double elapsed_ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::unexpected<Error> budget_error(const std::string& what) {
  return fail(ErrorCode::Limit, "budget exhausted: " + what);
}

}  // namespace

Result<std::string> KernelRunServices::query_with(Provider& provider, const std::string& prompt,
                                                  const std::optional<std::string>& model) {
  RunTree& tree = *s_.tree;
  if (auto used_up = tree.exhausted()) return budget_error(*used_up);
  if (s_.stop.stop_requested()) return fail(ErrorCode::Limit, "llm_query: the run was cancelled");
  const std::string span = tree.child_span(s_.span);
  const std::string from_code = code_run();
  Context ctx(prompt);
  ctx.stop = s_.stop;  // the provider aborts the request when the run is cancelled
  ctx.model = model ? model : s_.model;
  ctx.allowed_tools = std::vector<std::string>{};  // sub-queries never run tools
  const auto t0 = std::chrono::steady_clock::now();
  Result<Response> response = [&]() -> Result<Response> {
    try {
      return provider.complete(ctx, {}, {});
    } catch (const std::exception& e) {
      return fail(ErrorCode::Provider, std::string("provider threw: ") + e.what());
    }
  }();
  const double latency = elapsed_ms(t0);
  Json event = {{"span", span},
                {"parent", s_.span},
                {"depth", s_.depth + 1},
                {"kind", "llm_query"},
                {"model", ctx.model.value_or(provider.default_model())},
                {"prompt", prompt},
                {"latency_ms", latency}};
  if (!from_code.empty()) event["code_run"] = from_code;
  if (!response) {
    event["error"] = response.error().describe();
    if (tree.trajectory() != nullptr) tree.trajectory()->record("sub_call", std::move(event));
    return fail(ErrorCode::Provider, "llm_query failed", response.error());
  }
  Usage usage = response->usage;
  if (usage.cost_usd == 0.0 && s_.pricing != nullptr) {
    usage.cost_usd = s_.pricing->cost(
        response->model.empty() ? event["model"].get<std::string>() : response->model, usage);
  }
  tree.charge(usage);
  if (tree.trajectory() != nullptr) {
    if (!response->model.empty()) event["model"] = response->model;
    event["answer"] = response->text;
    event["input_tokens"] = usage.input_tokens;
    event["output_tokens"] = usage.output_tokens;
    event["cost_usd"] = usage.cost_usd;
    tree.trajectory()->record("sub_call", std::move(event));
  }
  return response->text;
}

Result<std::string> KernelRunServices::llm_query(const std::string& prompt,
                                                 const std::optional<std::string>& model) {
  if (!s_.provider)
    return fail(ErrorCode::Unsupported, "llm_query: no provider in this run (deferred mode)");
  return query_with(*s_.provider, prompt, model);
}

std::vector<Result<std::string>> KernelRunServices::llm_query_batched(
    const std::vector<std::string>& prompts, const std::optional<std::string>& model) {
  std::vector<Result<std::string>> out(prompts.size(), fail(ErrorCode::Internal, "not run"));
  if (!s_.provider) {
    std::fill(out.begin(), out.end(),
              fail(ErrorCode::Unsupported, "llm_query_batched: no provider (deferred mode)"));
    return out;
  }
  // Each worker owns a provider instance: plugins need not be thread-safe. The run's own
  // instance is the first; more come from the factory, as many as the bound allows.
  std::vector<std::shared_ptr<Provider>> workers{s_.provider};
  const std::size_t wanted = std::min(prompts.size(), std::max<std::size_t>(1, s_.max_concurrency));
  while (workers.size() < wanted && s_.more_providers) {
    auto extra = s_.more_providers();
    if (!extra) break;
    workers.push_back(*extra);
  }
  std::atomic<std::size_t> next{0};
  auto work = [&](Provider& provider) {
    for (std::size_t i = next++; i < prompts.size(); i = next++)
      out[i] = query_with(provider, prompts[i], model);
  };
  std::vector<std::jthread> threads;
  for (std::size_t w = 1; w < workers.size(); ++w)
    threads.emplace_back([&, w] { work(*workers[w]); });
  work(*workers[0]);
  return out;
}

Result<std::string> KernelRunServices::rlm_query(const std::string& prompt,
                                                 const std::optional<std::string>& context) {
  if (s_.depth + 1 > s_.tree->limits().max_depth) {
    return budget_error("depth (rlm_query at depth " + std::to_string(s_.depth + 1) +
                        " is past max_depth " + std::to_string(s_.tree->limits().max_depth) + ")");
  }
  if (auto used_up = s_.tree->exhausted()) return budget_error(*used_up);
  if (!s_.sub_runner)
    return fail(ErrorCode::Unsupported, "rlm_query: this run cannot start sub-agents");
  return s_.sub_runner(prompt, context, shared_from_this());
}

std::shared_ptr<const KernelRunServices::ToolAccess> KernelRunServices::bound_tools() const {
  std::lock_guard lock(mu_);
  return tools_;
}

std::vector<ToolSpec> KernelRunServices::tools() {
  const auto access = bound_tools();
  return access && access->list ? access->list() : std::vector<ToolSpec>{};
}

ToolResult KernelRunServices::call_tool(ToolCall call, const std::string& code_run,
                                        std::size_t result_max_bytes) {
  const auto access = bound_tools();
  if (!access || !access->call) return RunServices::call_tool(std::move(call), code_run);
  return access->call(std::move(call), code_run, result_max_bytes);
}

void KernelRunServices::submit_result(Json value, const std::string& code_run) {
  if (Trajectory* t = s_.tree->trajectory()) {
    t->record("result",
              {{"span", s_.span}, {"depth", s_.depth}, {"code_run", code_run}, {"value", value}});
  }
  std::lock_guard lock(mu_);
  result_ = std::move(value);
}

void KernelRunServices::set_code_run(std::string id) {
  std::lock_guard lock(mu_);
  code_run_ = std::move(id);
}

std::string KernelRunServices::code_run() const {
  std::lock_guard lock(mu_);
  return code_run_;
}

void KernelRunServices::bind_tools(ToolAccess access) {
  auto bound =
      access.list || access.call ? std::make_shared<const ToolAccess>(std::move(access)) : nullptr;
  std::lock_guard lock(mu_);
  tools_ = std::move(bound);
}

std::optional<Json> KernelRunServices::submitted() const {
  std::lock_guard lock(mu_);
  return result_;
}

}  // namespace kernex
