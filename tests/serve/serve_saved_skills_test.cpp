// Saved skills in `kernex serve`, through the real binary: code a tenant's run saves with
// save_skill() lands in that tenant's own area (<data_dir>/repl-skills/<tenant>); once a person
// trusted it (`kernex skills trust`) it is in the catalog of that tenant's later runs, never in
// another tenant's, and saved again (changed) it drops out until trusted again.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "serve_harness.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kDescription = "Counts the items that hold a word.";

std::string eval_code(const std::string& code) {
  return replay_tool_call("eval_code", {{"code", code}}, "e1");
}

std::string save_tally(const std::string& body) {
  return eval_code("save_skill('tally', " + body + ", '" + kDescription + "')\nprint('saved')\n");
}

class ServeSavedSkills : public ::testing::Test {
 protected:
  void SetUp() override {
    // The replay provider plays its lines in order, one per model call, across the runs below.
    const std::string script =
        save_tally("'def count(items, word):\\n    return sum(1 for i in items if word in i)\\n'") +
        replay_text("saved") + replay_text("untrusted run") + replay_text("trusted run") +
        replay_text("beta's run") + save_tally("'X = 1'") + replay_text("saved again") +
        replay_text("changed run");
    const fs::path script_file = w_.dir.write("script.jsonl", script);
    record_ = w_.dir.path() / "record.jsonl";
    w_.write_config("provider:\n  name: replay\n  options:\n    script: " + script_file.string() +
                        "\n    record: " + record_.string() + "\n",
                    "  keys_file: " + keys_file().string() + "\n",
                    "toolboxes:\n  - name: repl\n    options: {timeout: 60, offer: always}\n");
    for (auto [tenant, key] : {std::pair{"alpha", &key_a_}, std::pair{"beta", &key_b_}}) {
      auto added = w_.keys_in(keys_file(), {"add", tenant});
      ASSERT_EQ(added.exit_code, 0) << added.out << added.err;
      *key = printed_key(added.out);
    }
    ASSERT_TRUE(w_.start());
  }

  fs::path keys_file() const { return w_.data_dir / "serve-keys.json"; }
  fs::path folder(const std::string& tenant) const {
    return w_.data_dir / "repl-skills" / tenant / "tally";
  }

  // One run in its own session (so no history carries the saving code); the model's request.
  std::string run(const std::string& key, const std::string& session) {
    auto r = request(w_.port(), "POST", "/v1/sessions/" + session + "/messages", message_body("go"),
                     bearer(key));
    EXPECT_EQ(r.status, 200) << r.describe() << w_.log();
    const std::string recorded = slurp(record_);
    return recorded.substr(recorded.rfind('\n', recorded.size() - 2) + 1);
  }

  ProgramOutcome trust(const fs::path& skill) {
    return run_kernex({"skills", "trust", "--config", w_.config.string(), skill.string()},
                      w_.dir.path());
  }

  ServeWorld w_;
  fs::path record_;
  std::string key_a_, key_b_;
};

TEST_F(ServeSavedSkills, ATrustedSavedSkillIsInItsTenantsCatalogOnly) {
  run(key_a_, "save");
  ASSERT_TRUE(fs::is_regular_file(folder("alpha") / "SKILL.md")) << w_.log();
  ASSERT_TRUE(fs::is_regular_file(folder("alpha") / "tally.py"));
  EXPECT_FALSE(fs::exists(folder("beta")));

  EXPECT_THAT(run(key_a_, "untrusted"), Not(HasSubstr(kDescription)));

  auto trusted = trust(folder("alpha"));
  ASSERT_EQ(trusted.exit_code, 0) << trusted.out << trusted.err;
  EXPECT_THAT(run(key_a_, "trusted"), HasSubstr(kDescription));
  // Beta's runs never see alpha's saved skills.
  EXPECT_THAT(run(key_b_, "trusted"), Not(HasSubstr(kDescription)));

  // Saved again by code, it is another skill: out of the catalog until trusted again.
  run(key_a_, "save-again");
  EXPECT_THAT(run(key_a_, "changed"), Not(HasSubstr(kDescription)));
}

}  // namespace
