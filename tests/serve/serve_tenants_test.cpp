// Tenants and API keys: `kernex serve keys add|list|revoke`, 401 without a good key, one tenant
// never sees another's runs or sessions, revocation reaches the running server, and keys never
// reach the log.
#include <sys/stat.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "serve_harness.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;
using ::testing::HasSubstr;
using ::testing::Not;

class ServeTenants : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string script;
    for (int i = 0; i < 30; ++i) script += replay_text("answer " + std::to_string(i));
    const fs::path script_file = w_.dir.write("script.jsonl", script);
    record_ = w_.dir.path() / "record.jsonl";
    w_.write_config("provider:\n  name: replay\n  options:\n    script: " + script_file.string() +
                        "\n    record: " + record_.string() + "\n",
                    "  keys_file: " + keys_file().string() + "\n");
    auto a = w_.keys_in(keys_file(), {"add", "alpha"});
    ASSERT_EQ(a.exit_code, 0) << a.out << a.err;
    key_a_ = printed_key(a.out);
    auto b = w_.keys_in(keys_file(), {"add", "beta"});
    ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
    key_b_ = printed_key(b.out);
    ASSERT_GE(key_a_.size(), 16u) << "a guessable key: " << a.out;
    ASSERT_NE(key_a_, key_b_);
    ASSERT_TRUE(w_.start());
    port_ = w_.port();
  }
  fs::path keys_file() const { return w_.data_dir / "serve-keys.json"; }

  ServeWorld w_;
  fs::path record_;
  std::string key_a_, key_b_;
  int port_ = 0;
};

TEST_F(ServeTenants, KeysFileIsPrivateAndListShowsNoKeys) {
  struct stat st {};
  ASSERT_EQ(::stat(keys_file().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto list = w_.keys_in(keys_file(), {"list"});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_THAT(list.out, HasSubstr("alpha"));
  EXPECT_THAT(list.out, HasSubstr("beta"));
  EXPECT_THAT(list.out, Not(HasSubstr(key_a_)));
  EXPECT_THAT(list.out, Not(HasSubstr(key_b_)));
}

// The contract's form: `kernex serve keys [--config FILE] ...` finds the keys file through the
// config (serve.keys_file, else <data_dir>/serve-keys.json).
TEST(ServeKeysCommand, KeysCommandFindsTheKeysFileThroughTheConfig) {
  ServeWorld w;
  w.write_config(w.replay_provider(replay_text("x")));
  auto add = w.keys({"add", "delta"});
  ASSERT_EQ(add.exit_code, 0) << add.out << add.err;
  EXPECT_GE(printed_key(add.out).size(), 16u);
  EXPECT_TRUE(fs::exists(w.data_dir / "serve-keys.json"));
  auto list = w.keys({"list"});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_THAT(list.out, HasSubstr("delta"));
}

TEST_F(ServeTenants, MissingOrBadKeyIs401) {
  for (const Headers& h :
       std::vector<Headers>{{},
                            {{"Authorization", "Bearer wrong-key"}},
                            {{"Authorization", "Bearer "}},
                            {{"Authorization", "Basic " + key_a_}},
                            {{"Authorization", "Bearer " + key_a_ + "x"}},
                            {{"Authorization", "Bearer " + key_a_.substr(0, key_a_.size() - 1)}}}) {
    SCOPED_TRACE(h.empty() ? "no header" : h[0].second);
    auto r = request(port_, "POST", "/v1/sessions/s/messages", message_body("x"), h);
    EXPECT_EQ(r.status, 401) << r.describe();
    EXPECT_EQ(r.error_code(), "unauthorized") << r.describe();
    EXPECT_EQ(request(port_, "GET", "/v1/models", "", h).status, 401);
    EXPECT_EQ(
        request(port_, "POST", "/v1/chat/completions", R"({"model":"kernex","messages":[]})", h)
            .status,
        401);
  }
  EXPECT_EQ(request(port_, "GET", "/healthz").status, 200) << "healthz needs no key";
  auto ok = request(port_, "POST", "/v1/sessions/s/messages", message_body("x"), bearer(key_a_));
  EXPECT_EQ(ok.status, 200) << ok.describe();
  EXPECT_EQ(request(port_, "GET", "/v1/models", "", bearer(key_b_)).status, 200);
}

TEST_F(ServeTenants, OneTenantNeverSeesAnothersRunsOrSessions) {
  auto a = request(port_, "POST", "/v1/sessions/shared/messages", message_body("alpha secret 42"),
                   bearer(key_a_));
  ASSERT_EQ(a.status, 200) << a.describe();
  const std::string run = a.json().value("run_id", "");
  ASSERT_FALSE(run.empty());

  for (auto [method, target] :
       std::vector<std::pair<std::string, std::string>>{{"GET", "/v1/runs/" + run},
                                                        {"GET", "/v1/runs/" + run + "/events"},
                                                        {"POST", "/v1/runs/" + run + "/cancel"}}) {
    SCOPED_TRACE(method + " " + target);
    auto r = request(port_, method, target, "", bearer(key_b_));
    EXPECT_EQ(r.status, 404) << r.describe();
    EXPECT_EQ(r.error_code(), "not_found");
    EXPECT_THAT(r.body, Not(HasSubstr("alpha secret")));
  }
  // The same session name under beta is not alpha's session.
  auto msgs = request(port_, "GET", "/v1/sessions/shared/messages", "", bearer(key_b_));
  EXPECT_TRUE(msgs.status == 404 || (msgs.status == 200 && msgs.json()["messages"].empty()))
      << msgs.describe();
  EXPECT_THAT(msgs.body, Not(HasSubstr("alpha secret")));
  auto runs = request(port_, "GET", "/v1/sessions/shared/runs", "", bearer(key_b_));
  EXPECT_THAT(runs.body, Not(HasSubstr(run)));

  auto b = request(port_, "POST", "/v1/sessions/shared/messages", message_body("beta asks"),
                   bearer(key_b_));
  ASSERT_EQ(b.status, 200) << b.describe();
  const std::string recorded = slurp(record_);
  const auto last_line = recorded.substr(recorded.rfind('\n', recorded.size() - 2) + 1);
  EXPECT_THAT(last_line, HasSubstr("beta asks"));
  EXPECT_THAT(last_line, Not(HasSubstr("alpha secret"))) << "beta's run saw alpha's history";

  auto del = request(port_, "DELETE", "/v1/sessions/shared", "", bearer(key_b_));
  EXPECT_TRUE(del.status == 200 || del.status == 404) << del.describe();
  auto mine = session_messages(port_, "shared", bearer(key_a_));
  ASSERT_EQ(mine.size(), 2u) << "beta's delete touched alpha's session";
  EXPECT_EQ(content_text(mine[0]), "alpha secret 42");
  EXPECT_EQ(request(port_, "GET", "/v1/runs/" + run, "", bearer(key_a_)).status, 200);
}

// The provider's last request (the replay provider records each one it receives).
std::string last_request(const fs::path& record) {
  const std::string recorded = slurp(record);
  return recorded.substr(recorded.rfind('\n', recorded.size() - 2) + 1);
}

// Recall, facts and tasks are the tenant's: beta's session named like alpha's, asking about what
// alpha said, gets none of alpha's words in its prompt (recall matches words, and "support" or
// "main" sessions share words with nearly anything).
TEST_F(ServeTenants, RecallNeverCrossesTenantsThroughSessions) {
  auto a = request(port_, "POST", "/v1/sessions/support/messages",
                   message_body("my card number is 4111 quokka-zebra"), bearer(key_a_));
  ASSERT_EQ(a.status, 200) << a.describe();
  ASSERT_THAT(last_request(record_), HasSubstr("quokka-zebra"));
  auto b = request(port_, "POST", "/v1/sessions/support/messages",
                   message_body("what is my card number? quokka-zebra"), bearer(key_b_));
  ASSERT_EQ(b.status, 200) << b.describe();
  const std::string asked = last_request(record_);
  EXPECT_THAT(asked, HasSubstr("what is my card number"));
  EXPECT_THAT(asked, Not(HasSubstr("4111"))) << "beta's prompt holds alpha's words: " << asked;
  // Alpha's own session still recalls it in a later conversation turn.
  auto again = request(port_, "POST", "/v1/sessions/support/messages",
                       message_body("card number again"), bearer(key_a_));
  ASSERT_EQ(again.status, 200) << again.describe();
  EXPECT_THAT(last_request(record_), HasSubstr("4111"));
}

// The same through the OpenAI endpoint, whose X-Session-Id names the session (and whose `user`,
// the same in both tenants, names no memory). The client sends the conversation so far.
TEST_F(ServeTenants, RecallNeverCrossesTenantsThroughOpenAiUser) {
  const auto chat = [&](const std::string& key, const std::string& text,
                        Json before = Json::array()) {
    before.push_back({{"role", "user"}, {"content", text}});
    Json body{{"model", "kernex"}, {"user", "support"}, {"messages", before}};
    Headers h = bearer(key);
    h.emplace_back("X-Session-Id", "support");
    return request(port_, "POST", "/v1/chat/completions", body.dump(), h);
  };
  auto a = chat(key_a_, "my card number is 4111 quokka-zebra");
  ASSERT_EQ(a.status, 200) << a.describe();
  auto b = chat(key_b_, "what is my card number? quokka-zebra");
  ASSERT_EQ(b.status, 200) << b.describe();
  const std::string asked = last_request(record_);
  EXPECT_THAT(asked, HasSubstr("what is my card number"));
  EXPECT_THAT(asked, Not(HasSubstr("4111"))) << "beta's prompt holds alpha's words: " << asked;
  auto again =
      chat(key_a_, "card number again",
           Json::array({{{"role", "user"}, {"content", "my card number is 4111 quokka-zebra"}},
                        {{"role", "assistant"}, {"content", "noted"}}}));
  ASSERT_EQ(again.status, 200) << again.describe();
  EXPECT_THAT(last_request(record_), HasSubstr("4111"));
}

TEST_F(ServeTenants, RevokeTakesEffectOnTheRunningServer) {
  ASSERT_EQ(request(port_, "GET", "/v1/models", "", bearer(key_b_)).status, 200);
  auto rv = w_.keys_in(keys_file(), {"revoke", "beta"});
  ASSERT_EQ(rv.exit_code, 0) << rv.out << rv.err;
  // Bounded wait: the server may notice the file change a moment later.
  int status = 0;
  const auto deadline = Clock::now() + milliseconds(5000);
  while (Clock::now() < deadline) {
    status = request(port_, "GET", "/v1/models", "", bearer(key_b_)).status;
    if (status == 401) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(status, 401) << "beta's revoked key still works";
  EXPECT_EQ(request(port_, "GET", "/v1/models", "", bearer(key_a_)).status, 200)
      << "alpha was not revoked";
  auto list = w_.keys_in(keys_file(), {"list"});
  std::istringstream lines(list.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("beta") != std::string::npos) {
      EXPECT_THAT(line, HasSubstr("revoked")) << list.out;
    }
  }

  // A key added while the server runs works too.
  auto c = w_.keys_in(keys_file(), {"add", "gamma"});
  ASSERT_EQ(c.exit_code, 0);
  const std::string key_c = printed_key(c.out);
  const auto deadline2 = Clock::now() + milliseconds(5000);
  while (Clock::now() < deadline2) {
    status = request(port_, "GET", "/v1/models", "", bearer(key_c)).status;
    if (status == 200) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(status, 200) << "a key added while serving is not accepted";
}

TEST_F(ServeTenants, KeysNeverReachTheLog) {
  request(port_, "GET", "/v1/models", "", bearer(key_a_));
  request(port_, "POST", "/v1/sessions/s/messages", message_body("x"), bearer(key_b_));
  request(port_, "GET", "/v1/models", "", bearer("not-a-real-key-but-logged-maybe"));
  EXPECT_EQ(w_.server.stop(), std::optional<int>(0));
  const std::string log = w_.log();
  EXPECT_FALSE(log.empty()) << "the server logs requests";
  EXPECT_THAT(log, Not(HasSubstr(key_a_)));
  EXPECT_THAT(log, Not(HasSubstr(key_b_)));
  EXPECT_THAT(log, Not(HasSubstr("not-a-real-key-but-logged-maybe")));
}

// Beyond the contract, but what a keys file should be: a copy of it grants nothing.
TEST_F(ServeTenants, KeysFileHoldsNoPlainKeys) {
  EXPECT_THAT(slurp(keys_file()), Not(HasSubstr(key_a_)));
  EXPECT_THAT(slurp(keys_file()), Not(HasSubstr(key_b_)));
}

}  // namespace
