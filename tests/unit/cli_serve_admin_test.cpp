// `kernex serve keys` and `kernex serve webhooks` run as a user would (cli/serve_keys_command.cpp,
// cli/serve_webhooks_command.cpp): every action with its options before and after it, usage
// errors naming what was wrong with the shared exit codes, and mistyped or missing actions named.
// The webhook outbox is seeded through the server's own store, in serve.db and in PostgreSQL.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "cluster_outbox.hpp"
#include "kernex/json.hpp"
#include "pg_test_db.hpp"
#include "run_store.hpp"
#include "temp_dir.hpp"
#include "webhook_outbox.hpp"

namespace fs = std::filesystem;
using kernex::Json;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

using Outcome = kernex::testing::CliOutcome;
using Args = std::vector<std::string>;

class ServeAdminCli : public ::testing::Test {
 protected:
  void SetUp() override {
    env_ = kernex::testing::clean_environment();
    env_["KERNEX_DATA_DIR"] = (dir_ / "data").string();
    env_["KERNEX_PLUGIN_PATH"] = (dir_ / "no-plugins").string();
    fs::create_directories(dir_ / "out");
    config_ = dir_.write("k.yaml", "serve:\n  keys_file: " + keys_.string() + "\n");
  }

  Outcome kernex(const Args& args) { return kernex::testing::run_cli(dir_ / "out", env_, args); }
  // `serve GROUP OPTIONS ACTION...` or `serve GROUP ACTION... OPTIONS`.
  Outcome placed(const std::string& group, bool before, const Args& options, const Args& action) {
    Args args{"serve", group};
    if (before) args.insert(args.end(), options.begin(), options.end());
    args.insert(args.end(), action.begin(), action.end());
    if (!before) args.insert(args.end(), options.begin(), options.end());
    return kernex(args);
  }

  kernex::testing::TempDir dir_;
  fs::path keys_ = dir_ / "keys.json";
  fs::path config_;
  std::map<std::string, std::string> env_;
};

// The key id of the tenant's first listed key.
std::string key_id(const std::string& listing, const std::string& tenant) {
  const auto at = listing.find('\t' + tenant + '\t');
  if (at == std::string::npos) return "";
  const auto line = listing.rfind('\n', at);
  return listing.substr(line == std::string::npos ? 0 : line + 1,
                        at - (line == std::string::npos ? 0 : line + 1));
}

// The bug this fixes: `serve keys add acme --config k.yaml` said "expected one TENANT".
TEST_F(ServeAdminCli, KeysActionsTakeTheirOptionsBeforeOrAfter) {
  const std::vector<Args> option_sets = {{"--config", config_.string()},
                                         {"--keys-file", keys_.string()}};
  int round = 0;
  for (const bool before : {true, false}) {
    for (const Args& options : option_sets) {
      SCOPED_TRACE(options[0] + (before ? " before" : " after"));
      const std::string acme = "acme" + std::to_string(++round), beta = "beta" + acme.substr(4);
      auto add = placed("keys", before, options, {"add", acme});
      ASSERT_EQ(add.exit_code, 0) << add.err;
      EXPECT_TRUE(add.out.starts_with("kx-")) << add.out;
      EXPECT_THAT(add.err, HasSubstr("added a key for tenant '" + acme + "' to " + keys_.string()));
      auto list = placed("keys", before, options, {"list"});
      ASSERT_EQ(list.exit_code, 0) << list.err;
      EXPECT_THAT(list.out, HasSubstr("\t" + acme + "\t"));
      EXPECT_THAT(list.out, Not(HasSubstr(add.out.substr(3, 20))));  // never the key
      auto by_tenant = placed("keys", before, options, {"revoke", acme});
      ASSERT_EQ(by_tenant.exit_code, 0) << by_tenant.err;
      EXPECT_EQ(by_tenant.out, "revoked 1 key\n");
      ASSERT_EQ(placed("keys", before, options, {"add", beta}).exit_code, 0);
      const std::string id = key_id(placed("keys", before, options, {"list"}).out, beta);
      ASSERT_FALSE(id.empty());
      auto by_id = placed("keys", before, options, {"revoke", "--id", id});
      ASSERT_EQ(by_id.exit_code, 0) << by_id.err;
      EXPECT_EQ(by_id.out, "revoked 1 key\n");
      EXPECT_EQ(placed("keys", before, options, {"revoke", beta}).out, "revoked 0 keys\n");
    }
  }
  // --data-dir, on `serve` or after the action: the keys file in that data dir.
  const fs::path data = dir_ / "other-data";
  ASSERT_EQ(kernex({"serve", "--data-dir", data.string(), "keys", "add", "x"}).exit_code, 0);
  auto listed = kernex({"serve", "keys", "list", "--data-dir", data.string()});
  EXPECT_THAT(listed.out, HasSubstr("\tx\t"));
  EXPECT_TRUE(fs::exists(data / "serve-keys.json"));
}

TEST_F(ServeAdminCli, KeysUsageErrorsNameTheProblemAndExitTwo) {
  const std::vector<std::pair<Args, std::string>> cases = {
      {{"list", "--bogus"}, "--bogus"},
      {{"add", "acme", "--frob", "1"}, "--frob"},
      {{"add"}, "TENANT is required"},
      {{"add", "a", "b"}, "not expected: b"},
      {{"list", "x"}, "not expected: x"},
      {{"revoke"}, "expected TENANT or --id KEY_ID"},
      {{"revoke", "acme", "--id", "abc"}, "expected TENANT or --id KEY_ID"},
      {{"revoke", "--id"}, "--id"},
      {{"add", "../etc"}, "tenant name '../etc'"},
      {{"ad", "acme"}, "unknown command 'ad'; did you mean 'add'?"},
      {{"rovoke", "acme"}, "did you mean 'revoke'?"},
      {{"rotate", "acme"}, "unknown command 'rotate'; the commands are: add list revoke"},
      {{}, "missing command after 'kernex serve keys'; the commands are: add list revoke"},
      {{"--bogus"}, "unknown option '--bogus'"},
  };
  for (const auto& [action, message] : cases) {
    Args args{"serve", "keys", "--keys-file", keys_.string()};
    args.insert(args.end(), action.begin(), action.end());
    auto r = kernex(args);
    EXPECT_EQ(r.exit_code, 2) << ::testing::PrintToString(action) << r.err;
    EXPECT_THAT(r.err, HasSubstr(message)) << ::testing::PrintToString(action);
    EXPECT_TRUE(r.out.empty());
  }
  EXPECT_FALSE(fs::exists(keys_));  // no usage error wrote anything

  // A keys file that is not one: a config error (3) naming the file, before or after the action.
  const fs::path bad = dir_.write("bad.json", "{}");
  for (const Args& args : {Args{"serve", "keys", "--keys-file", bad.string(), "list"},
                           Args{"serve", "keys", "list", "--keys-file", bad.string()}}) {
    auto r = kernex(args);
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_THAT(r.err, HasSubstr(bad.string()));
  }
}

// Two failed deliveries and one pending in `outbox`; returns the failed ones' ids.
std::vector<std::int64_t> seed(kernex::server::OutboxStore& outbox) {
  using kernex::server::make_webhook_event;
  std::vector<std::int64_t> failed;
  for (const char* url : {"http://127.0.0.1:9/a", "http://127.0.0.1:9/b"}) {
    const auto event = make_webhook_event("run.completed", Json{{"run_id", url}});
    EXPECT_TRUE(outbox.put(event, {url}, "acme"));
    auto due = outbox.take_due(url, 1);
    EXPECT_TRUE(due && due->size() == 1u);
    if (!due || due->empty()) continue;
    auto gave_up = outbox.mark_failed(due->front(), 5'000, 1'000, "refused");
    EXPECT_TRUE(gave_up && *gave_up);
    failed.push_back(due->front().id);
  }
  const auto pending = make_webhook_event("run.failed", Json{{"run_id", "run_p"}});
  EXPECT_TRUE(outbox.put(pending, {"http://127.0.0.1:9/c"}, "acme"));
  return failed;
}

// Every webhooks action, with the options that find the outbox before and after it.
void exercise_webhooks(const Args& options, const std::vector<std::int64_t>& failed,
                       const std::function<Outcome(bool, const Args&)>& run) {
  ASSERT_EQ(failed.size(), 2u);
  for (const bool before : {true, false}) {
    SCOPED_TRACE(options[0] + (before ? " before" : " after"));
    auto all = run(before, {"list", "--json"});
    ASSERT_EQ(all.exit_code, 0) << all.err;
    EXPECT_EQ(Json::parse(all.out).size(), 3u);
    auto text = run(before, {"list"});
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_THAT(text.out, HasSubstr("\tfailed\trun.completed\t"));
    EXPECT_THAT(text.out, HasSubstr("\trefused\n"));
  }
  auto failed_only = run(true, {"list", "--failed", "--json"});
  ASSERT_EQ(failed_only.exit_code, 0) << failed_only.err;
  EXPECT_EQ(Json::parse(failed_only.out).size(), 2u);
  EXPECT_EQ(run(false, {"list", "--json", "--failed"}).out, failed_only.out);

  auto one = run(true, {"retry", std::to_string(failed[0])});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(one.out, "retrying 1 delivery\n");
  auto again = run(false, {"retry", std::to_string(failed[0]), "987654"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, "retrying 0 deliveries\n");
  EXPECT_THAT(again.err, HasSubstr("2 of the ids named no failed delivery"));
  EXPECT_EQ(Json::parse(run(false, {"list", "--failed", "--json"}).out).size(), 1u);
  auto rest = run(false, {"retry", "--all-failed"});
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_EQ(rest.out, "retrying 1 delivery\n");
  EXPECT_EQ(run(true, {"list", "--failed", "--json"}).out, "[]\n");
  EXPECT_EQ(run(true, {"retry", "--all-failed"}).out, "retrying 0 deliveries\n");
}

TEST_F(ServeAdminCli, WebhooksActionsOnServeDbTakeTheirOptionsBeforeOrAfter) {
  const fs::path data = dir_ / "hooks-data";
  fs::create_directories(data);
  auto made = kernex::server::RunStore::open(data / "serve.db");  // serve.db as a server makes it
  ASSERT_TRUE(made) << made.error().describe();
  auto outbox = kernex::server::WebhookOutbox::open(data / "serve.db");
  ASSERT_TRUE(outbox) << outbox.error().describe();
  const auto failed = seed(**outbox);
  const Args options{"--data-dir", data.string()};
  exercise_webhooks(options, failed, [&](bool before, const Args& action) {
    return placed("webhooks", before, options, action);
  });
}

TEST_F(ServeAdminCli, WebhooksActionsOnPostgresTakeTheirOptionsBeforeOrAfter) {
  kernex::testing::PgTestDb db;
  if (db.dsn().empty()) GTEST_SKIP() << kernex::testing::PgTestDb::skip_reason();
  kernex::pg::Options pg;
  pg.dsn = db.dsn();
  auto outbox = kernex::server::ClusterOutbox::open(pg);
  ASSERT_TRUE(outbox) << outbox.error().describe();
  const auto failed = seed(**outbox);
  const fs::path config = dir_.write(
      "pg.yaml", "memory:\n  name: postgres\n  options:\n    dsn: \"" + db.dsn() + "\"\n");
  const Args options{"--config", config.string()};
  exercise_webhooks(options, failed, [&](bool before, const Args& action) {
    return placed("webhooks", before, options, action);
  });
  EXPECT_FALSE(fs::exists(dir_ / "data" / "serve.db"));  // cluster mode never touched serve.db
}

TEST_F(ServeAdminCli, WebhooksUsageErrorsNameTheProblemAndExitTwo) {
  const std::vector<std::pair<Args, std::string>> cases = {
      {{"list", "--bogus"}, "--bogus"},
      {{"retry", "1", "--frob"}, "--frob"},
      {{"list", "x"}, "not expected: x"},
      {{"retry"}, "expected IDs or --all-failed"},
      {{"retry", "1", "--all-failed"}, "expected IDs or --all-failed"},
      {{"retry", "x1"}, "'x1' is not a delivery id"},
      {{"retry", "0"}, "'0' is not a delivery id"},
      {{"retry", "99999999999999999999"}, "is not a delivery id"},
      {{"lst"}, "unknown command 'lst'; did you mean 'list'?"},
      {{"frobnicate"}, "unknown command 'frobnicate'; the commands are: list retry"},
      {{}, "missing command after 'kernex serve webhooks'; the commands are: list retry"},
  };
  const fs::path data = dir_ / "hooks-data";
  for (const auto& [action, message] : cases) {
    Args args{"serve", "webhooks"};
    args.insert(args.end(), action.begin(), action.end());
    args.insert(args.end(), {"--data-dir", data.string()});
    if (action.empty()) args = {"serve", "webhooks", "--data-dir", data.string()};
    auto r = kernex(args);
    EXPECT_EQ(r.exit_code, 2) << ::testing::PrintToString(action) << r.err;
    EXPECT_THAT(r.err, HasSubstr(message)) << ::testing::PrintToString(action);
    EXPECT_TRUE(r.out.empty());
  }
  EXPECT_FALSE(fs::exists(data));  // nothing was opened, let alone made
  auto typo = kernex({"serve", "webhok", "list"});
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_THAT(typo.err, HasSubstr("did you mean 'webhooks'?"));
}

}  // namespace
