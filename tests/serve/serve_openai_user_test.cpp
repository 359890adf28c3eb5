// Issue 33: OpenAI's `user` scopes recall and facts within the tenant, and is never a session. What
// alice said in one named session is recalled in her other sessions, never in bob's (same tenant)
// nor in another tenant's alice; her session still lists and forgets its own messages, and after
// the forget nothing of them is recalled.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>

#include "serve_harness.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;
using ::testing::HasSubstr;
using ::testing::Not;

class ServeOpenAiUser : public ::testing::Test {
 protected:
  void SetUp() override {
    llm_.set_responder([this](const FakeLlm::Request& r) {
      std::lock_guard lock(mutex_);
      last_ = r.body.dump();
      return FakeLlm::Plan{{"noted"}};
    });
    w_.write_config(ServeWorld::openai_provider(llm_));
    alpha_ = bearer(printed_key(w_.keys({"add", "alpha"}).out));
    beta_ = bearer(printed_key(w_.keys({"add", "beta"}).out));
    ASSERT_TRUE(w_.start());
  }
  // One message from `user` in `session` of the key's tenant; the provider request it made.
  std::string say(Headers key, const std::string& session, const std::string& user,
                  const std::string& text) {
    key.emplace_back("X-Session-Id", session);
    Json body{{"model", "kernex"},
              {"user", user},
              {"messages", Json::array({{{"role", "user"}, {"content", text}}})}};
    auto r = request(w_.port(), "POST", "/v1/chat/completions", body.dump(), key);
    EXPECT_EQ(r.status, 200) << r.describe() << w_.log();
    std::lock_guard lock(mutex_);
    return last_;
  }

  FakeLlm llm_;
  ServeWorld w_;
  Headers alpha_, beta_;
  std::mutex mutex_;
  std::string last_;
};

TEST_F(ServeOpenAiUser, RecallFollowsTheUserWithinTheTenant) {
  say(alpha_, "s1", "alice@example.com", "my locker code is zebrafish 7731");
  const std::string question = "which locker code did I give, zebrafish?";
  EXPECT_THAT(say(alpha_, "s2", "alice@example.com", question), HasSubstr("7731"))
      << "alice's other session recalls what she said";
  EXPECT_THAT(say(alpha_, "s3", "bob@example.com", question), Not(HasSubstr("7731")))
      << "another user of the tenant recalls nothing of hers";
  EXPECT_THAT(say(beta_, "s1", "alice@example.com", question), Not(HasSubstr("7731")))
      << "another tenant's alice recalls nothing of alpha's";

  // The session keeps and forgets its own messages, whoever spoke in it.
  auto listed = session_messages(w_.port(), "s1", alpha_);
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(content_text(listed[0]), "my locker code is zebrafish 7731");
  auto del = request(w_.port(), "DELETE", "/v1/sessions/s1", "", alpha_);
  ASSERT_EQ(del.status, 200) << del.describe();
  EXPECT_TRUE(session_is_empty(w_.port(), "s1", alpha_));
  EXPECT_THAT(say(alpha_, "s4", "alice@example.com", question), Not(HasSubstr("7731")))
      << "a forgotten session's words are not recalled";
}

}  // namespace
