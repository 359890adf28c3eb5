// Forget means forget, and a session id is the client's string, never a path:
// - DELETE /v1/sessions/{s} leaves no byte of the session's words in any file under the data dir
//   (memory.db and its FTS index, serve.db and the -wal/-shm files, trajectories, the workspace,
//   the webhook outbox), while another session's words stay;
// - `kernex memory forget --conversation ID` does the same for a conversation of `kernex run`;
// - an e-mail, "../..", "a/b", ".hidden", "Main" beside "main" are sessions of their own whose
//   files stay inside the tenant's workspace area, and ids with control bytes, bad UTF-8 or over
//   256 bytes are refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "kernex/trajectory_segments.hpp"
#include "serve_harness.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;

// Every regular file under `root` whose bytes hold `word` (a directory that cannot be read is
// reported as a hit: the scan must see everything).
std::vector<std::string> files_holding(const fs::path& root, const std::string& word) {
  std::vector<std::string> hits;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) {
      hits.push_back("(unreadable) " + ec.message());
      ec.clear();
      continue;
    }
    if (it->path().filename().string().find(word) != std::string::npos)
      hits.push_back(it->path().string() + " (name)");
    if (!it->is_regular_file(ec)) continue;
    if (slurp(it->path()).find(word) != std::string::npos) hits.push_back(it->path().string());
  }
  return hits;
}

std::string encode_path_segment(const std::string& s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
  }
  return out;
}

constexpr const char* kWord = "quokkafjord7731";
constexpr const char* kKept = "wombatlagoon4410";

class ServeForget : public ::testing::Test {
 protected:
  void configure(const std::string& extra_yaml = "") {
    std::string script =
        replay_tool_call("write",
                         Json{{"file_path", "secret.txt"}, {"content", std::string(kWord) + "\n"}},
                         "w1", "remember") +
        replay_text(std::string("noted: ") + kWord, "remember") +
        replay_text(std::string("kept: ") + kKept, "keep");
    for (int i = 0; i < 16; ++i) script += replay_text("ok");
    // An endpoint that never answers, retried only after ten minutes: the run's event (holding
    // the answer) stays in the outbox, undelivered, when the session is deleted.
    w_.write_config(w_.replay_provider(script),
                    "  webhooks:\n    - url: http://127.0.0.1:9/hook\n      secret: whsec-forget\n"
                    "      events: [run.completed, run.failed]\n"
                    "      backoff_base_ms: 600000\n      backoff_cap_ms: 600000\n",
                    "toolboxes:\n  - files\n" + extra_yaml);
    ASSERT_TRUE(w_.start());
    port_ = w_.port();
  }
  HttpResponse say(const std::string& session, const std::string& message) {
    return request(port_, "POST", "/v1/sessions/" + encode_path_segment(session) + "/messages",
                   message_body(message));
  }

  ServeWorld w_;
  int port_ = 0;
};

TEST_F(ServeForget, DeleteLeavesNoByteOfTheSessionUnderTheDataDir) {
  configure();
  const std::string session = "alice@example.com";
  auto said = say(session, std::string("remember ") + kWord + " please");
  ASSERT_EQ(said.status, 200) << said.describe();
  ASSERT_THAT(said.body, ::testing::HasSubstr(kWord));
  auto other = say("bob", std::string("keep ") + kKept);
  ASSERT_EQ(other.status, 200) << other.describe();

  // The scan finds the words where they were written: it would see them if they stayed.
  const auto before = files_holding(w_.data_dir, kWord);
  ASSERT_FALSE(before.empty());
  const std::string all_before = ::testing::PrintToString(before);
  EXPECT_THAT(all_before, ::testing::HasSubstr("trajectories")) << all_before;
  EXPECT_THAT(all_before, ::testing::HasSubstr("secret.txt")) << all_before;

  auto deleted = request(port_, "DELETE", "/v1/sessions/" + encode_path_segment(session), "", {});
  ASSERT_EQ(deleted.status, 200) << deleted.describe();

  EXPECT_THAT(files_holding(w_.data_dir, kWord), ::testing::IsEmpty());
  EXPECT_THAT(files_holding(w_.data_dir, kKept), ::testing::Not(::testing::IsEmpty()))
      << "another session's words must stay";
  // Its run too, in the day segment both sessions shared: cut out, not the whole file removed.
  EXPECT_THAT(files_holding(w_.data_dir / "trajectories", kKept),
              ::testing::Not(::testing::IsEmpty()));
  EXPECT_EQ(
      request(port_, "GET", "/v1/sessions/" + encode_path_segment(session) + "/messages").status,
      404);
  auto kept = session_messages(port_, "bob");
  ASSERT_FALSE(kept.empty());

  // After a restart too (nothing was only hidden by a cache), and a new run of the same id
  // starts from nothing.
  w_.server.stop();
  EXPECT_THAT(files_holding(w_.data_dir, kWord), ::testing::IsEmpty());
}

TEST_F(ServeForget, SessionIdsAreTheClientsStringsNeverPaths) {
  configure("workspace: {mode: overlay}\n");
  const std::vector<std::string> ids = {
      "alice@example.com", "../../escape",       "a/b", ".hidden", "..", "Main", "main",
      "ünï cødé",          std::string(256, 'x')};
  for (const auto& id : ids) {
    SCOPED_TRACE(id);
    auto r = say(id, "keep this");
    ASSERT_EQ(r.status, 200) << r.describe();
    auto messages = request(port_, "GET", "/v1/sessions/" + encode_path_segment(id) + "/messages");
    ASSERT_EQ(messages.status, 200) << messages.describe();
    EXPECT_EQ(messages.json()["messages"].size(), 2u) << messages.body;  // its own only
  }
  // Trajectories: the tenant's day segments only, no folder or file named after an id.
  for (const auto& e : fs::directory_iterator(w_.data_dir / "trajectories" / "serve" / "local")) {
    EXPECT_TRUE(e.is_directory() && kernex::is_trajectory_day_dir(e.path().filename().string()))
        << e.path();
  }
  // One workspace folder per id, all inside the tenant's folder, none hidden, none two ids
  // apart only by case.
  const fs::path folder = w_.data_dir / "workspaces" / "local";
  std::set<std::string> names, folded;
  for (const auto& e : fs::directory_iterator(folder)) {
    const std::string name = e.path().filename().string();
    names.insert(name);
    folded.insert(lower(name));
    EXPECT_NE(name[0], '.') << name;
    EXPECT_LE(name.size(), 64u) << name;
  }
  EXPECT_EQ(names.size(), ids.size()) << ::testing::PrintToString(names);
  EXPECT_EQ(folded.size(), ids.size()) << ::testing::PrintToString(names);
  EXPECT_FALSE(fs::exists(w_.data_dir / "escape"));
  EXPECT_FALSE(fs::exists(w_.dir.path() / "escape"));
  EXPECT_FALSE(fs::exists(w_.data_dir / "trajectories" / "escape"));

  // Refused with a typed error: control bytes, bad UTF-8, more than 256 bytes.
  for (const std::string& target :
       {std::string("a%0Ab"), std::string("a%00b"), std::string("%FF%FE"), std::string(257, 'y')}) {
    SCOPED_TRACE(target);
    auto r = request(port_, "POST", "/v1/sessions/" + target + "/messages", message_body("x"));
    EXPECT_EQ(r.status, 400) << r.describe();
    EXPECT_THAT(r.body, ::testing::HasSubstr("invalid_session"));
  }

  // The OpenAI endpoint: an e-mail `user` is a valid end user.
  auto oa = request(port_, "POST", "/v1/chat/completions",
                    Json{{"model", "kernex"},
                         {"user", "carol@example.com"},
                         {"messages", Json::array({Json{{"role", "user"}, {"content", "keep"}}})}}
                        .dump());
  EXPECT_EQ(oa.status, 200) << oa.describe();
}

// In overlay mode the session's writes are in its layer under overlays/tenants/<tenant>: gone too.
TEST_F(ServeForget, DeleteRemovesTheSessionsOverlayLayers) {
  configure("workspace: {mode: overlay}\n");
  auto said = say("Ov@rlay", std::string("remember ") + kWord);
  ASSERT_EQ(said.status, 200) << said.describe();
  const auto before = ::testing::PrintToString(files_holding(w_.data_dir, kWord));
  if (before.find("overlays") == std::string::npos)
    GTEST_SKIP() << "no overlay layer was written here (overlays unavailable?): " << said.body;
  auto deleted = request(port_, "DELETE", "/v1/sessions/Ov%40rlay", "", {});
  ASSERT_EQ(deleted.status, 200) << deleted.describe();
  EXPECT_THAT(files_holding(w_.data_dir, kWord), ::testing::IsEmpty());
  EXPECT_EQ(request(port_, "GET", "/v1/sessions/Ov%40rlay/workspace").status, 404);
}

// A session whose files were made hostile by its tools (a folder without access, a symlink out)
// is still removed whole, and nothing outside is touched.
TEST_F(ServeForget, DeleteRemovesAHostileWorkspace) {
  configure();
  ASSERT_EQ(say("mallory", std::string("remember ") + kWord).status, 200);
  fs::path ws;
  for (const auto& e : fs::directory_iterator(w_.data_dir / "workspaces" / "local"))
    if (fs::exists(e.path() / "secret.txt")) ws = e.path();
  ASSERT_FALSE(ws.empty());
  const fs::path outside = w_.dir.path() / "outside.txt";
  std::ofstream(outside) << kWord;
  fs::create_directories(ws / "locked" / "deep");
  std::ofstream(ws / "locked" / "deep" / "more.txt") << kWord;
  fs::create_symlink(outside, ws / "link");
  fs::permissions(ws / "locked", fs::perms::none);
  auto deleted = request(port_, "DELETE", "/v1/sessions/mallory", "", {});
  ASSERT_EQ(deleted.status, 200) << deleted.describe();
  EXPECT_THAT(files_holding(w_.data_dir, kWord), ::testing::IsEmpty());
  EXPECT_EQ(slurp(outside), kWord) << "the symlink's target is not the session's";
}

// `kernex memory forget --conversation ID`: the conversation of a `kernex run` is gone from
// memory.db (rows, recall index, WAL) and its trajectory file is removed.
TEST(MemoryForget, ForgetsAConversationAndItsTrajectories) {
  ServeWorld w;
  w.write_config(w.replay_provider(replay_text(std::string("noted ") + kWord)));
  auto ran = run_kernex({"run", "--config", w.config.string(), std::string("remember ") + kWord},
                        w.dir.path());
  ASSERT_EQ(ran.exit_code, 0) << ran.out << ran.err;
  ASSERT_FALSE(files_holding(w.data_dir, kWord).empty());

  auto listed =
      run_kernex({"memory", "history", "--config", w.config.string(), "--json"}, w.dir.path());
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  const Json conversations = Json::parse(listed.out, nullptr, false);
  ASSERT_TRUE(conversations.is_array() && conversations.size() == 1u) << listed.out;
  const std::string id = conversations[0].value("id", "");
  ASSERT_FALSE(id.empty()) << listed.out;

  auto forgot = run_kernex(
      {"memory", "forget", "--config", w.config.string(), "--conversation", id, "--json"},
      w.dir.path());
  ASSERT_EQ(forgot.exit_code, 0) << forgot.out << forgot.err;
  EXPECT_THAT(forgot.out, ::testing::HasSubstr("\"trajectories_removed\":1")) << forgot.out;
  EXPECT_THAT(files_holding(w.data_dir, kWord), ::testing::IsEmpty());
  auto again = run_kernex({"memory", "forget", "--config", w.config.string(), "--conversation", id},
                          w.dir.path());
  EXPECT_NE(again.exit_code, 0) << "a second forget finds nothing: " << again.out;
}

}  // namespace
