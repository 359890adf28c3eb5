// ToolRouter::collect with executors that share their tool lists (kernex/toolbox.hpp's
// SharedToolList): runs of the same lists reuse one merge and copy no schema, and every case the
// merge cannot serve (a filter, context tools, a list made for the run) is collected as before.
#include <gtest/gtest.h>

#include "agent_loop.hpp"

namespace kernex {
namespace {

ToolSpec spec(const std::string& name, const std::string& property = "x") {
  return ToolSpec{name,
                  "does " + name,
                  Json{{"type", "object"}, {"properties", {{property, {{"type", "string"}}}}}},
                  {}};
}

ToolResult answered_by(const std::string& who, const ToolCall& call) {
  return ToolResult{call.id, call.name, who, false, {}};
}

class Sharing final : public ToolExecutor, public SharedToolList {
 public:
  Sharing(std::string who, std::vector<ToolSpec> specs)
      : who_(std::move(who)), list_(std::make_shared<const std::vector<ToolSpec>>(specs)) {}
  void replace(std::vector<ToolSpec> specs) {
    list_ = std::make_shared<const std::vector<ToolSpec>>(std::move(specs));
  }
  Result<std::vector<ToolSpec>> list_tools(const Context&) override {
    ADD_FAILURE() << "list_tools called on an executor that shares its list";
    return *list_;
  }
  Result<std::shared_ptr<const std::vector<ToolSpec>>> list_tools_shared(const Context&) override {
    return list_;
  }
  Result<ToolResult> execute(const Context&, const RunHandles&, const ToolCall& call) override {
    return answered_by(who_, call);
  }

 private:
  std::string who_;
  std::shared_ptr<const std::vector<ToolSpec>> list_;
};

class Copying final : public ToolExecutor {
 public:
  Copying(std::string who, std::vector<ToolSpec> specs)
      : who_(std::move(who)), specs_(std::move(specs)) {}
  Result<std::vector<ToolSpec>> list_tools(const Context&) override { return specs_; }
  Result<ToolResult> execute(const Context&, const RunHandles&, const ToolCall& call) override {
    return answered_by(who_, call);
  }

 private:
  std::string who_;
  std::vector<ToolSpec> specs_;
};

class Failing final : public ToolExecutor, public SharedToolList {
 public:
  Result<std::vector<ToolSpec>> list_tools(const Context&) override {
    return fail(ErrorCode::Tool, "unused");
  }
  Result<std::shared_ptr<const std::vector<ToolSpec>>> list_tools_shared(const Context&) override {
    throw std::runtime_error("listing broke");
  }
  Result<ToolResult> execute(const Context&, const RunHandles&, const ToolCall& call) override {
    return answered_by("failing", call);
  }
};

class Nothing final : public ContextTool {
 public:
  ToolSpec spec() const override { return kernex::spec("switch_on"); }
  Result<ToolResult> execute(Context&, const ToolCall& call) override {
    return answered_by("context", call);
  }
};

std::vector<std::string> names(const ToolRouter& router) {
  std::vector<std::string> out;
  for (const auto& s : router.specs()) out.push_back(s.name);
  return out;
}

std::string who_runs(const ToolRouter& router, const std::string& name) {
  ToolExecutor* executor = router.find(name);
  if (executor == nullptr) return "(none)";
  return executor->execute(Context{}, RunHandles{}, ToolCall{"c1", name, Json::object()})->content;
}

TEST(ToolRouter, RunsOfTheSameSharedListsReuseOneMergeAndRouteToTheirOwnExecutors) {
  auto a = std::make_shared<Sharing>("a", std::vector{spec("calc"), spec("count")});
  auto b = std::make_shared<Sharing>("b", std::vector{spec("read"), spec("calc", "y")});
  auto empty = std::make_shared<Copying>("empty", std::vector<ToolSpec>{});
  const std::vector<std::shared_ptr<ToolExecutor>> executors{a, empty, b};
  MergedToolsCache cache;
  const ToolRouter first = ToolRouter::collect(executors, Context{}, {}, &cache);
  const ToolRouter second = ToolRouter::collect(executors, Context{}, {}, &cache);
  EXPECT_EQ(names(first), (std::vector<std::string>{"calc", "count", "read"}));
  EXPECT_EQ(&first.specs(), &second.specs()) << "the second run merged again";
  EXPECT_EQ(first.specs()[0].parameters["properties"].contains("x"), true);  // the first calc
  EXPECT_EQ(who_runs(second, "calc"), "a");
  EXPECT_EQ(who_runs(second, "read"), "b");
  EXPECT_EQ(second.code_specs().size(), 3u);

  // Another kernel with other executors sharing the same lists routes to its own.
  auto a2 = std::make_shared<Sharing>(*a);
  auto b2 = std::make_shared<Sharing>(*b);
  const ToolRouter other = ToolRouter::collect({a2, b2}, Context{}, {}, &cache);
  EXPECT_EQ(&other.specs(), &first.specs());
  EXPECT_EQ(who_runs(other, "calc"), "a");
  EXPECT_EQ(other.find("calc"), a2.get());
  EXPECT_EQ(other.find("read"), b2.get());
}

TEST(ToolRouter, ANewListIsMergedAgain) {
  auto a = std::make_shared<Sharing>("a", std::vector{spec("calc")});
  const std::vector<std::shared_ptr<ToolExecutor>> executors{a};
  MergedToolsCache cache;
  EXPECT_EQ(names(ToolRouter::collect(executors, Context{}, {}, &cache)),
            (std::vector<std::string>{"calc"}));
  a->replace({spec("calc"), spec("grep")});
  EXPECT_EQ(names(ToolRouter::collect(executors, Context{}, {}, &cache)),
            (std::vector<std::string>{"calc", "grep"}));
  // Without a cache (a caller that keeps none) the lists are copied, as from list_tools.
  const ToolRouter uncached = ToolRouter::collect(executors, Context{});
  EXPECT_EQ(names(uncached), (std::vector<std::string>{"calc", "grep"}));
  EXPECT_EQ(uncached.find("grep"), a.get());
}

TEST(ToolRouter, FiltersContextToolsAndCopiedListsAreCollectedAsBefore) {
  auto a = std::make_shared<Sharing>("a", std::vector{spec("calc"), spec("count")});
  auto c = std::make_shared<Copying>("c", std::vector{spec("read"), spec("count", "z")});
  MergedToolsCache cache;
  Context filtered;
  filtered.allowed_tools = std::vector<std::string>{"count"};
  EXPECT_EQ(names(ToolRouter::collect({a}, filtered, {}, &cache)),
            (std::vector<std::string>{"count"}));

  const ToolRouter mixed = ToolRouter::collect({a, c}, Context{}, {}, &cache);
  EXPECT_EQ(names(mixed), (std::vector<std::string>{"calc", "count", "read"}));
  EXPECT_EQ(who_runs(mixed, "count"), "a");
  EXPECT_EQ(who_runs(mixed, "read"), "c");

  const ToolRouter with_context =
      ToolRouter::collect({a}, Context{}, {std::make_shared<Nothing>()}, &cache);
  EXPECT_EQ(names(with_context), (std::vector<std::string>{"calc", "count", "switch_on"}));
  EXPECT_NE(with_context.find_context_tool("switch_on"), nullptr);
  EXPECT_EQ(with_context.code_specs().size(), 2u);  // context tools are not code's
}

// One run's filter neither reads the merge the unfiltered runs share nor leaves anything in it.
TEST(ToolRouter, AFilteredRunNeitherUsesNorChangesTheMergeOthersGet) {
  auto a = std::make_shared<Sharing>("a", std::vector{spec("calc"), spec("count"), spec("read")});
  MergedToolsCache cache;
  const ToolRouter before = ToolRouter::collect({a}, Context{}, {}, &cache);
  Context filtered;
  filtered.allowed_tools = std::vector<std::string>{"read"};
  const ToolRouter narrow = ToolRouter::collect({a}, filtered, {}, &cache);
  EXPECT_EQ(names(narrow), (std::vector<std::string>{"read"}));
  EXPECT_EQ(narrow.find("calc"), nullptr);
  const ToolRouter after = ToolRouter::collect({a}, Context{}, {}, &cache);
  EXPECT_EQ(names(after), (std::vector<std::string>{"calc", "count", "read"}));
  EXPECT_EQ(&after.specs(), &before.specs());
}

TEST(ToolRouter, AnExecutorThatFailsToListIsSkipped) {
  auto a = std::make_shared<Sharing>("a", std::vector{spec("calc")});
  MergedToolsCache cache;
  const ToolRouter router =
      ToolRouter::collect({std::make_shared<Failing>(), a}, Context{}, {}, &cache);
  EXPECT_EQ(names(router), (std::vector<std::string>{"calc"}));
  EXPECT_EQ(who_runs(router, "calc"), "a");
}

}  // namespace
}  // namespace kernex
