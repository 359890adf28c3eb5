// kernex serve with `workspace: {mode: overlay}`: a session's runs write into its overlay layer
// (workspace_changed events name what each tool call wrote), the session's workspace stays as it
// was until POST .../workspace/accept, and another tenant's session is not found.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "serve_harness.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;
using ::testing::HasSubstr;

class ServeWorkspace : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string script =
        replay_tool_call("write", Json{{"file_path", "notes.txt"}, {"content", "hello\n"}}, "w1",
                         "write notes") +
        replay_text("wrote", "write notes") +
        replay_tool_call("read", Json{{"file_path", "notes.txt"}}, "r1", "read notes") +
        replay_text("read", "read notes") +
        replay_tool_call("write", Json{{"file_path", "later.txt"}, {"content", "x"}}, "w2",
                         "write later") +
        replay_text("wrote later", "write later");
    const fs::path keys = w_.data_dir / "serve-keys.json";
    w_.write_config(w_.replay_provider(script), "  keys_file: " + keys.string() + "\n",
                    "toolboxes:\n  - files\nworkspace: {mode: overlay}\n");
    auto a = w_.keys_in(keys, {"add", "alpha"});
    ASSERT_EQ(a.exit_code, 0) << a.out << a.err;
    alpha_ = bearer(printed_key(a.out));
    auto b = w_.keys_in(keys, {"add", "beta"});
    ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
    beta_ = bearer(printed_key(b.out));
    ASSERT_TRUE(w_.start());
    port_ = w_.port();
  }

  // Runs one message in session s1 of alpha, streamed; its events.
  std::vector<SseEvent> say(const std::string& message) {
    SseReader sse(port_, "POST", "/v1/sessions/s1/messages",
                  message_body(message, Json{{"stream", true}}), alpha_);
    EXPECT_TRUE(sse.ok()) << sse.head().describe();
    return sse.drain();
  }
  static std::vector<Json> named(const std::vector<SseEvent>& events, const std::string& name) {
    std::vector<Json> out;
    for (const auto& e : events)
      if (e.event == name) out.push_back(e.json());
    return out;
  }
  fs::path real() const { return w_.data_dir / "workspaces" / "alpha" / "s1"; }

  ServeWorld w_;
  Headers alpha_, beta_;
  int port_ = 0;
};

TEST_F(ServeWorkspace, ReviewAcceptAndRejectASessionsOverlay) {
  auto events = say("write notes");
  auto results = named(events, "tool_result");
  ASSERT_EQ(results.size(), 1u) << ::testing::PrintToString(names(events));
  if (results[0].value("is_error", false) &&
      results[0].value("content", "").find("overlay") != std::string::npos)
    GTEST_SKIP() << "overlay not available here: " << results[0].dump();
  ASSERT_FALSE(results[0].value("is_error", true)) << results[0].dump();
  auto changed = named(events, "workspace_changed");
  ASSERT_EQ(changed.size(), 1u) << ::testing::PrintToString(names(events));
  EXPECT_EQ(changed[0]["paths"], Json::array({"notes.txt"}));
  EXPECT_EQ(changed[0].value("tool_call_id", ""), "w1");
  EXPECT_FALSE(fs::exists(real() / "notes.txt"));

  // A call that only reads changes nothing: no event; it sees the earlier write.
  auto read = say("read notes");
  EXPECT_TRUE(named(read, "workspace_changed").empty());
  ASSERT_EQ(named(read, "tool_result").size(), 1u);
  EXPECT_THAT(named(read, "tool_result")[0].value("content", ""), HasSubstr("hello"));

  auto status = request(port_, "GET", "/v1/sessions/s1/workspace", "", alpha_);
  ASSERT_EQ(status.status, 200) << status.describe();
  ASSERT_EQ(status.json()["changes"].size(), 1u) << status.body;
  EXPECT_EQ(status.json()["changes"][0]["path"], "notes.txt");
  EXPECT_EQ(status.json()["changes"][0]["kind"], "added");

  auto diff = request(port_, "GET", "/v1/sessions/s1/workspace/diff", "", alpha_);
  ASSERT_EQ(diff.status, 200) << diff.describe();
  EXPECT_THAT(diff.header("content-type"), HasSubstr("text/x-diff"));
  EXPECT_THAT(diff.body, HasSubstr("+++ b/notes.txt\n@@ -0,0 +1 @@\n+hello\n"));
  auto diff_json = request(port_, "GET", "/v1/sessions/s1/workspace/diff?format=json", "", alpha_);
  EXPECT_EQ(diff_json.json()["diff"], diff.body);

  // Another tenant's session of the same name is not found, for every route.
  for (auto [method, target] : std::vector<std::pair<std::string, std::string>>{
           {"GET", "/v1/sessions/s1/workspace"},
           {"GET", "/v1/sessions/s1/workspace/diff"},
           {"POST", "/v1/sessions/s1/workspace/accept"},
           {"POST", "/v1/sessions/s1/workspace/reject"}}) {
    SCOPED_TRACE(method + " " + target);
    auto r = request(port_, method, target, "", beta_);
    EXPECT_EQ(r.status, 404) << r.describe();
    EXPECT_THAT(r.body, ::testing::Not(HasSubstr("hello")));
  }
  EXPECT_EQ(
      request(port_, "POST", "/v1/sessions/s1/workspace/accept", R"({"pathz": []})", alpha_).status,
      400);
  EXPECT_EQ(request(port_, "GET", "/v1/sessions/s1/workspace/accept", "", alpha_).status, 405);

  // What a run wrote over a kernel path (AGENTS.md here, planted in the layer) lands only when the
  // force list names it (issue 31); `"force": true` is not enough.
  fs::path upper;
  for (const auto& e : fs::directory_iterator(w_.data_dir / "overlays" / "tenants" / "alpha"))
    upper = e.path() / "upper";
  std::ofstream(upper / "AGENTS.md") << "planted\n";
  auto guarded = request(port_, "POST", "/v1/sessions/s1/workspace/accept",
                         R"({"paths": ["AGENTS.md"], "force": true})", alpha_);
  ASSERT_EQ(guarded.status, 200) << guarded.describe();
  EXPECT_TRUE(guarded.json()["applied"].empty()) << guarded.body;
  ASSERT_EQ(guarded.json()["refused"].size(), 1u) << guarded.body;
  EXPECT_EQ(guarded.json()["refused"][0]["path"], "AGENTS.md");
  EXPECT_FALSE(fs::exists(real() / "AGENTS.md"));
  EXPECT_EQ(request(port_, "POST", "/v1/sessions/s1/workspace/accept", R"({"force": [1]})", alpha_)
                .status,
            400);
  auto landed = request(port_, "POST", "/v1/sessions/s1/workspace/accept",
                        R"({"paths": ["AGENTS.md"], "force": ["AGENTS.md"]})", alpha_);
  ASSERT_EQ(landed.status, 200) << landed.describe();
  EXPECT_EQ(landed.json()["applied"], Json::array({"AGENTS.md"}));
  EXPECT_EQ(landed.json()["kernel_landed"], Json::array({"AGENTS.md"}));
  EXPECT_EQ(slurp(real() / "AGENTS.md"), "planted\n");

  auto accepted = request(port_, "POST", "/v1/sessions/s1/workspace/accept",
                          R"({"paths": ["notes.txt"], "force": false})", alpha_);
  ASSERT_EQ(accepted.status, 200) << accepted.describe();
  EXPECT_EQ(accepted.json()["applied"], Json::array({"notes.txt"}));
  EXPECT_TRUE(accepted.json()["conflicts"].empty());
  EXPECT_TRUE(accepted.json()["layer_removed"].get<bool>());
  EXPECT_EQ(slurp(real() / "notes.txt"), "hello\n");
  EXPECT_EQ(request(port_, "GET", "/v1/sessions/s1/workspace", "", alpha_).status, 404);

  // The next run gets a fresh layer; reject drops what it wrote.
  auto later = say("write later");
  ASSERT_EQ(named(later, "workspace_changed").size(), 1u);
  EXPECT_EQ(named(later, "workspace_changed")[0]["paths"], Json::array({"later.txt"}));
  auto fresh = request(port_, "GET", "/v1/sessions/s1/workspace", "", alpha_);
  ASSERT_EQ(fresh.json()["changes"].size(), 1u) << fresh.body;
  EXPECT_EQ(fresh.json()["changes"][0]["path"], "later.txt");
  auto rejected = request(port_, "POST", "/v1/sessions/s1/workspace/reject", "", alpha_);
  ASSERT_EQ(rejected.status, 200) << rejected.describe();
  EXPECT_FALSE(fs::exists(real() / "later.txt"));
  EXPECT_EQ(slurp(real() / "notes.txt"), "hello\n");
  EXPECT_EQ(request(port_, "GET", "/v1/sessions/s1/workspace", "", alpha_).status, 404);
}

}  // namespace
