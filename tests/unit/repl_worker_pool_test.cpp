// The REPL's warm worker pool: pre-started sandboxed python3 workers, each handed to one session
// only, refilled in the background, never outliving the toolbox. Driven directly (its counters and
// wait_idle show what it did) and through the repl plugin (processes seen in /proc by their
// working directory: each test's workspace is its own).
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <thread>

#include "kernex/plugin_host.hpp"
#include "kernex/run_services.hpp"
#include "kernex/sandbox/policy.hpp"
#include "proc_scan.hpp"
#include "repl_options.hpp"
#include "repl_session.hpp"
#include "session_only_services.hpp"
#include "temp_dir.hpp"
#include "worker_pool.hpp"

namespace kernex {
namespace {

using repl::ReplSession;
using repl::WorkerPool;
using testing::TempDir;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Python starts in tens of milliseconds, more under the sanitizers on a busy machine.
constexpr std::chrono::seconds kPatience{60};

Clock::time_point patience() { return Clock::now() + kPatience; }

// Waits (a condition on /proc, no sleep) until exactly `count` live process groups work in `dir`.
std::set<pid_t> await_groups_in(const fs::path& dir, std::size_t count) {
  const auto deadline = patience();
  for (;;) {
    auto groups = testing::groups_working_in(dir);
    if (groups.size() == count || Clock::now() >= deadline) return groups;
    std::this_thread::yield();
  }
}

std::string eval_line(const std::string& code) {
  return Json{{"op", "eval"}, {"code", code}}.dump() + "\n";
}

// What `code` printed in `worker`, or the error.
std::string run(ReplSession& worker, const std::string& code) {
  auto answer =
      worker.request("eval", eval_line(code), "", std::chrono::seconds(20), [](const Json&) {
        return Json{{"ok", false}};
      });
  if (!answer) return "request failed: " + answer.error().describe();
  auto reply = worker.parse(*answer);
  if (!reply) return "bad reply: " + reply.error().describe();
  const Json& value = (*reply)["value"];
  return value.contains("error") ? value["error"].get<std::string>()
                                 : value["stdout"].get<std::string>();
}

class ReplWorkerPool : public ::testing::Test {
 protected:
  // The policy a REPL worker in `workspace` runs under.
  static WorkerPool::Policy policy_in(const fs::path& workspace) {
    auto options = repl::ReplOptions::from_json(Json{{"workspace", workspace.string()}});
    EXPECT_TRUE(options) << options.error().describe();
    auto built = sandbox::PolicyBuilder(options->profile({})).Build();
    EXPECT_TRUE(built) << built.error().describe();
    return std::make_shared<const sandbox::Policy>(std::move(*built));
  }
  static WorkerPool::MakePolicy maker(WorkerPool::Policy policy) {
    return [policy]() -> Result<WorkerPool::Policy> { return policy; };
  }
  static std::unique_ptr<WorkerPool> pool(std::size_t per_key) {
    return std::make_unique<WorkerPool>(per_key, "python3", std::chrono::seconds(30));
  }

  TempDir ws_;
};

TEST_F(ReplWorkerPool, WorkersAreHandedOutOnceAndRefilledAfterATake) {
  const auto policy = policy_in(ws_.path());
  auto p = pool(2);
  p->prewarm("k", maker(policy));
  ASSERT_TRUE(p->wait_idle("k", 2, patience()));
  EXPECT_EQ(p->stats().started, 2u);

  auto a = p->take("k", policy);
  auto b = p->take("k", policy);
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->pid(), b->pid());
  EXPECT_EQ(p->stats().handed_out, 2u);
  // Taking is what refills: two more start in the background, and none of them is a or b.
  ASSERT_TRUE(p->wait_idle("k", 2, patience()));
  EXPECT_EQ(p->stats().started, 4u);
  auto c = p->take("k", policy);
  ASSERT_TRUE(c);
  EXPECT_NE(c->pid(), a->pid());
  EXPECT_NE(c->pid(), b->pid());

  // Each is a REPL of its own, ready at once.
  EXPECT_EQ(run(*a, "secret = 'a'\nprint(secret)"), "a\n");
  EXPECT_NE(run(*b, "print(secret)").find("NameError"), std::string::npos);
  EXPECT_EQ(run(*c, "import os\nprint(os.getcwd())"), fs::canonical(ws_.path()).string() + "\n");
}

TEST_F(ReplWorkerPool, AWorkerThatDiedWhileIdleIsNotHandedOut) {
  const auto policy = policy_in(ws_.path());
  auto p = pool(1);
  p->prewarm("k", maker(policy));
  ASSERT_TRUE(p->wait_idle("k", 1, patience()));
  const auto idle = testing::groups_working_in(ws_.path());
  ASSERT_EQ(idle.size(), 1u);
  for (pid_t group : idle) ::kill(-group, SIGKILL);
  ASSERT_TRUE(testing::groups_gone_by(idle, patience()));

  EXPECT_EQ(p->take("k", policy), nullptr);
  EXPECT_EQ(p->stats().discarded, 1u);
  EXPECT_EQ(p->stats().handed_out, 0u);
  // Its replacement is alive and answers.
  ASSERT_TRUE(p->wait_idle("k", 1, patience()));
  auto fresh = p->take("k", policy);
  ASSERT_TRUE(fresh);
  EXPECT_FALSE(idle.contains(fresh->pid()));
  EXPECT_EQ(run(*fresh, "print(6 * 7)"), "42\n");
}

TEST_F(ReplWorkerPool, SizeZeroStartsNothingAndEveryTakeStartsAfresh) {
  const auto policy = policy_in(ws_.path());
  auto p = pool(0);
  p->prewarm("k", maker(policy));
  EXPECT_EQ(p->take("k", policy), nullptr);
  EXPECT_FALSE(p->wait_idle("k", 1, Clock::now()));
  auto started = p->take_or_start("k", policy);
  ASSERT_TRUE(started) << started.error().describe();
  EXPECT_EQ(run(**started, "print('fresh')"), "fresh\n");
  EXPECT_EQ(testing::groups_working_in(ws_.path()), std::set<pid_t>{(*started)->pid()});
  const auto stats = p->stats();
  EXPECT_EQ(stats.started + stats.handed_out + stats.discarded + stats.failed, 0u);
}

// Keys are policies (workspace and grants): a worker started for one tenant's workspace is never
// handed to another's, and only the most recently used keys stay warm.
TEST_F(ReplWorkerPool, KeysKeepTheirOwnWorkersAndOnlyTheRecentOnesStayWarm) {
  std::vector<fs::path> spaces;
  std::vector<WorkerPool::Policy> policies;
  for (std::size_t i = 0; i <= WorkerPool::kMaxKeys; ++i) {
    spaces.push_back(ws_ / ("tenant" + std::to_string(i)));
    fs::create_directories(spaces.back());
    policies.push_back(policy_in(spaces.back()));
  }
  auto p = pool(1);
  std::vector<std::unique_ptr<ReplSession>> taken;
  for (std::size_t i = 0; i < spaces.size(); ++i) {
    const std::string key = "k" + std::to_string(i);
    p->prewarm(key, maker(policies[i]));
    ASSERT_TRUE(p->wait_idle(key, 1, patience())) << key;
    taken.push_back(p->take(key, policies[i]));
    ASSERT_TRUE(taken.back()) << key;
    EXPECT_EQ(testing::groups_working_in(spaces[i]).count(taken.back()->pid()), 1u) << key;
  }
  // The last kMaxKeys keys are refilled; the first was dropped and its refill killed.
  for (std::size_t i = 1; i < spaces.size(); ++i) {
    const std::string key = "k" + std::to_string(i);
    ASSERT_TRUE(p->wait_idle(key, 1, patience())) << key;
    EXPECT_EQ(await_groups_in(spaces[i], 2).size(), 2u) << key;  // the taken one and a warm one
  }
  EXPECT_EQ(p->idle("k0"), 0u);
  EXPECT_EQ(await_groups_in(spaces[0], 1), std::set<pid_t>{taken[0]->pid()});
}

TEST_F(ReplWorkerPool, DestroyingThePoolKillsItsIdleWorkersAndStopsAStartInFlight) {
  const auto policy = policy_in(ws_.path());
  auto p = pool(2);
  p->prewarm("k", maker(policy));
  ASSERT_TRUE(p->wait_idle("k", 2, patience()));
  auto mine = p->take("k", policy);  // a refill starts now
  ASSERT_TRUE(mine);
  auto others = testing::groups_working_in(ws_.path());
  ASSERT_EQ(others.erase(mine->pid()), 1u);
  EXPECT_GE(others.size(), 1u);  // the other idle one, and perhaps the refill
  p.reset();
  EXPECT_TRUE(testing::groups_gone_by(others, Clock::now() + std::chrono::seconds(5)));
  EXPECT_EQ(testing::groups_working_in(ws_.path()), std::set<pid_t>{mine->pid()});
  // What was handed out is the session's: it outlives the pool.
  EXPECT_EQ(run(*mine, "print('still mine')"), "still mine\n");
}

// --- through the repl plugin ------------------------------------------------------------------

RunHandles in_session(std::string session) {
  RunHandles run;
  run.services = std::make_shared<testing::SessionOnlyServices>(std::move(session));
  return run;
}

class ReplPoolToolbox : public ::testing::Test {
 protected:
  Result<std::shared_ptr<ToolExecutor>> make(Json config) {
    config["workspace"] = ws_.path().string();
    return host_.create_toolbox("repl", config);
  }
  // Runs `code` in `session`'s REPL; returns the answer's JSON.
  Json eval(ToolExecutor& repl, const std::string& session, const std::string& code) {
    auto r = repl.execute(Context{}, in_session(session),
                          ToolCall{"c" + std::to_string(++calls_), "eval_code", {{"code", code}}});
    EXPECT_TRUE(r) << r.error().describe();
    Json j = Json::parse(r ? r->content : "{}", nullptr, false);
    EXPECT_TRUE(j.is_object()) << (r ? r->content : "");
    return j;
  }
  // The process group of `session`'s worker, found by moving its working directory to a folder
  // named after the session.
  pid_t worker_of(ToolExecutor& repl, const std::string& session) {
    Json moved =
        eval(repl, session, "import os\nos.mkdir('" + session + "')\nos.chdir('" + session + "')");
    EXPECT_FALSE(moved.contains("error")) << moved.dump();
    EXPECT_FALSE(moved.contains("state_lost")) << moved.dump();
    const auto groups = testing::groups_working_in(ws_ / session);
    EXPECT_EQ(groups.size(), 1u) << session;
    return groups.empty() ? 0 : *groups.begin();
  }

  TempDir ws_;
  PluginHost host_ = PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
  int calls_ = 0;
};

TEST_F(ReplPoolToolbox, PoolSizeIsRangeCheckedAsATypedConfigError) {
  for (const Json& bad : {Json(-1), Json(65), Json(1.5), Json("2"), Json(nullptr), Json::array()}) {
    auto made = make(Json{{"pool_size", bad}});
    ASSERT_FALSE(made) << bad.dump();
    // The host says which plugin could not be made; the cause is the option's typed error.
    ASSERT_TRUE(made.error().cause) << made.error().describe();
    EXPECT_EQ(made.error().cause->code, ErrorCode::Config) << made.error().describe();
    EXPECT_NE(made.error().cause->message.find("`pool_size` expected"), std::string::npos)
        << made.error().describe();
  }
  auto off = make(Json{{"pool_size", 0}});
  ASSERT_TRUE(off) << off.error().describe();
}

TEST_F(ReplPoolToolbox, NewSessionsTakePreStartedWorkersNeverTheSameOne) {
  auto made = make(Json{{"pool_size", 2}});
  ASSERT_TRUE(made) << made.error().describe();
  auto repl = std::move(*made);
  // Nothing starts until the tools are offered (a kernel loads every toolbox found by default).
  ASSERT_TRUE(repl->list_tools(Context{}));
  EXPECT_TRUE(testing::groups_working_in(ws_.path()).empty());
  Context offered;
  offered.allowed_tools = std::vector<std::string>{"eval_code"};
  auto listed = repl->list_tools(offered);
  ASSERT_TRUE(listed && !listed->empty());
  // Prewarmed once offered, one worker at a time: once a second is seen starting in the configured
  // workspace, the first is ready in the pool, and the first new session gets it.
  const auto warm = await_groups_in(ws_.path(), 2);
  ASSERT_EQ(warm.size(), 2u);
  const pid_t a = worker_of(*repl, "a");  // its worker moves to ws/a
  EXPECT_TRUE(warm.contains(a));
  // Taking it started a refill, so the second is ready too once a third is seen.
  const auto second = await_groups_in(ws_.path(), 2);
  ASSERT_EQ(second.size(), 2u);
  const pid_t b = worker_of(*repl, "b");
  EXPECT_TRUE(warm.contains(b));
  EXPECT_NE(a, b);
  EXPECT_FALSE(eval(*repl, "a", "secret = 1").contains("error"));
  EXPECT_NE(eval(*repl, "b", "print(secret)")["error"].get<std::string>().find("NameError"),
            std::string::npos);

  // Refilled again; the older of the two (ready, and next in line) is killed while idle: the next
  // session never gets it, and its first call runs as if nothing happened.
  const auto refilled = await_groups_in(ws_.path(), 2);
  ASSERT_EQ(refilled.size(), 2u);
  EXPECT_FALSE(refilled.contains(a) || refilled.contains(b));
  auto next_in_line = second;
  next_in_line.erase(b);
  ASSERT_EQ(next_in_line.size(), 1u);
  const pid_t victim = *next_in_line.begin();
  ASSERT_TRUE(refilled.contains(victim));
  ::kill(-victim, SIGKILL);
  ASSERT_TRUE(testing::groups_gone_by({victim}, patience()));
  const pid_t c = worker_of(*repl, "c");
  EXPECT_NE(c, victim);
  EXPECT_NE(c, 0);
  Json first = eval(*repl, "c", "print('fine')");
  EXPECT_EQ(first["stdout"], "fine\n") << first.dump();
  EXPECT_FALSE(first.contains("state_lost")) << first.dump();

  // Sessions' workers and idle ones alike end with the toolbox.
  auto all = testing::groups_working_in(ws_.path());
  all.insert({a, b, c});
  repl.reset();
  EXPECT_TRUE(testing::groups_gone_by(all, Clock::now() + std::chrono::seconds(5)));
  EXPECT_TRUE(testing::groups_working_in(ws_.path()).empty());
  for (const char* s : {"a", "b", "c"}) EXPECT_TRUE(testing::groups_working_in(ws_ / s).empty());
}

TEST_F(ReplPoolToolbox, PoolSizeZeroStartsAWorkerPerSessionAsBefore) {
  auto made = make(Json{{"pool_size", 0}});
  ASSERT_TRUE(made) << made.error().describe();
  auto repl = std::move(*made);
  EXPECT_TRUE(testing::groups_working_in(ws_.path()).empty());  // nothing prewarmed
  EXPECT_EQ(eval(*repl, "a", "x = 1\nprint(x)")["stdout"], "1\n");
  EXPECT_NE(eval(*repl, "b", "print(x)")["error"].get<std::string>().find("NameError"),
            std::string::npos);
  EXPECT_EQ(testing::groups_working_in(ws_.path()).size(), 2u);  // the two sessions', no more
  const auto groups = testing::groups_working_in(ws_.path());
  repl.reset();
  EXPECT_TRUE(testing::groups_gone_by(groups, Clock::now() + std::chrono::seconds(5)));
}

}  // namespace
}  // namespace kernex
