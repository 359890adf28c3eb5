// plan_run: one set of effective limits per run (the run's options over the config's, a sub-run's
// budgets from its tree), the provider and its merged options, and whether memory is used.
#include "run_plan.hpp"

#include <gtest/gtest.h>

#include "kernel_run_services.hpp"
#include "run_tree.hpp"
#include "session_only_services.hpp"

namespace kernex {
namespace {

Config config_with_limits() {
  Config config;
  config.provider.name = "replay";
  config.provider.config = Json{{"script", "a.json"}, {"speed", 1}};
  config.provider_options["replay"] = Json{{"speed", 2}};
  config.channel = "cli";
  config.project = "p";
  config.limits.budgets.max_turns = 7;
  config.limits.max_depth = 2;
  config.limits.budgets.token_budget = 1000;
  config.limits.budgets.cost_budget_usd = 0.5;
  config.limits.budgets.tool_call_budget = 9;
  return config;
}

std::string key_of(const ConversationKey& key) {
  return key.channel + "/" + key.sender_id + "/" + key.project;
}

TEST(RunPlan, TheRunsOptionsOverrideTheConfigsLimitsOneByOne) {
  const Config config = config_with_limits();
  RunOptions options;
  options.budgets.max_turns = 3;
  options.budgets.cost_budget_usd = 0.1;
  options.max_depth = 4;
  auto plan = plan_run(config, options, Request::from_text("alice", "hi"));
  ASSERT_TRUE(plan) << plan.error().describe();
  EXPECT_EQ(plan->limits.budgets.max_turns, 3u);
  EXPECT_EQ(plan->limits.max_depth, 4u);
  EXPECT_EQ(plan->limits.budgets.token_budget, 1000u);
  EXPECT_EQ(plan->limits.budgets.cost_budget_usd, 0.1);
  EXPECT_EQ(plan->limits.budgets.tool_call_budget, 9u);
  EXPECT_EQ(plan->parent, nullptr);
}

TEST(RunPlan, ProviderOptionsAreTheConfigsThenTheProvidersThenTheRuns) {
  const Config config = config_with_limits();
  RunOptions options;
  options.provider_options = Json{{"script", "b.json"}};
  auto plan = plan_run(config, options, Request::from_text("alice", "hi"));
  ASSERT_TRUE(plan) << plan.error().describe();
  EXPECT_EQ(plan->provider, "replay");
  EXPECT_EQ(plan->provider_options, (Json{{"script", "b.json"}, {"speed", 2}}));

  options.provider = "echo";  // another provider: the default provider's options are not its own
  plan = plan_run(config, options, Request::from_text("alice", "hi"));
  ASSERT_TRUE(plan) << plan.error().describe();
  EXPECT_EQ(plan->provider_options, (Json{{"script", "b.json"}}));
}

TEST(RunPlan, MemoryIsTheRootRunsUnlessItWasGivenItsHistory) {
  const Config config = config_with_limits();
  RunOptions options;
  auto plan = plan_run(config, options, Request::from_text("alice", "hi"));
  ASSERT_TRUE(plan) << plan.error().describe();
  EXPECT_TRUE(plan->uses_memory);
  EXPECT_TRUE(plan->audits_to_memory);
  EXPECT_EQ(key_of(plan->conversation), "cli/alice/p");

  options.history = std::vector<ContextEntry>{ContextEntry::user("before")};
  options.conversation = ConversationKey{"http", "t1", "s1"};
  plan = plan_run(config, options, Request::from_text("alice", "hi"));
  ASSERT_TRUE(plan) << plan.error().describe();
  EXPECT_FALSE(plan->uses_memory);
  EXPECT_FALSE(plan->audits_to_memory);
  EXPECT_EQ(key_of(plan->conversation), "http/t1/s1");
}

TEST(RunPlan, ASubRunKeepsItsTreesBudgetsAndDepthWithItsOwnTurns) {
  const Config config = config_with_limits();
  const Limits root{.budgets = {.max_turns = 40,
                                .token_budget = 50,
                                .cost_budget_usd = std::nullopt,
                                .tool_call_budget = 2},
                    .max_depth = 1};
  KernelRunServices::Setup setup;
  setup.tree = std::make_shared<RunTree>(root, nullptr, "session");
  auto parent = std::make_shared<KernelRunServices>(std::move(setup));

  RunOptions options;
  options.parent = parent;
  options.budgets.token_budget = 1'000'000;  // a sub-run cannot raise what its tree allows
  options.max_depth = 9;
  auto plan = plan_run(config, options, Request::from_text("rlm", "sub"));
  ASSERT_TRUE(plan) << plan.error().describe();
  EXPECT_EQ(plan->parent, parent.get());
  EXPECT_EQ(plan->limits.budgets.max_turns, 7u);  // the config's: max_turns is each run's own
  EXPECT_EQ(plan->limits.max_depth, 1u);
  EXPECT_EQ(plan->limits.budgets.token_budget, 50u);
  EXPECT_FALSE(plan->limits.budgets.cost_budget_usd);
  EXPECT_EQ(plan->limits.budgets.tool_call_budget, 2u);
  EXPECT_FALSE(plan->uses_memory);
  EXPECT_TRUE(plan->audits_to_memory);
}

TEST(RunPlan, NoProviderOrAForeignParentIsATypedError) {
  Config config;
  auto none = plan_run(config, {}, Request::from_text("alice", "hi"));
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::Config);
  EXPECT_NE(none.error().message.find("no provider"), std::string::npos);

  RunOptions options;
  options.provider = "replay";
  options.parent = std::make_shared<testing::SessionOnlyServices>("foreign");
  auto foreign = plan_run(config, options, Request::from_text("alice", "hi"));
  ASSERT_FALSE(foreign);
  EXPECT_EQ(foreign.error().code, ErrorCode::Internal);
}

}  // namespace
}  // namespace kernex
