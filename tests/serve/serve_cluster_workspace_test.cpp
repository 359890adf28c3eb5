// Workspaces across `kernex serve` nodes (README "Workspaces across nodes"): with serve.workspaces
// on a directory both nodes share, a session's file written by a run on one node is read by its
// next run on the other; a node whose workspace root it cannot write refuses to start, naming it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pg_test_db.hpp"
#include "serve_harness.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;
using kernex::testing::PgTestDb;
using ::testing::HasSubstr;

class ServeClusterWorkspace : public ::testing::Test {
 protected:
  void SetUp() override {
    if (db_.dsn().empty()) {
      if (HasFailure()) FAIL() << "no test database";
      GTEST_SKIP() << PgTestDb::skip_reason();
    }
  }

  fs::path write_config(const fs::path& workspaces) {
    const std::string script =
        replay_tool_call("write", Json{{"file_path", "notes.txt"}, {"content", "shared hello\n"}},
                         "w1", "write notes") +
        replay_text("wrote", "write notes") +
        replay_tool_call("read", Json{{"file_path", "notes.txt"}}, "r1", "read notes") +
        replay_text("read", "read notes");
    return dir_.write("kernex.yaml", "provider:\n  name: replay\n  options:\n    script: " +
                                         dir_.write("script.jsonl", script).string() +
                                         "\nmemory:\n  name: postgres\n" +
                                         "  options:\n    dsn: " + Json(db_.dsn()).dump() +
                                         "\ntoolboxes:\n  - files\nserve:\n  workspaces: " +
                                         workspaces.string() + "\n  cluster: {lease_s: 2}\n");
  }
  bool start(ServeProcess& node, const fs::path& config, const std::string& name) {
    fs::create_directories(dir_.path() / name);
    return node.start({"--config", config.string(), "--listen", "127.0.0.1:0", "--data-dir",
                       (dir_.path() / name).string()},
                      dir_.path() / (name + ".stderr"));
  }

  PgTestDb db_;
  TempDir dir_;
};

std::vector<SseEvent> say(int port, const std::string& message) {
  SseReader sse(port, "POST", "/v1/sessions/s1/messages",
                message_body(message, Json{{"stream", true}}));
  EXPECT_TRUE(sse.ok()) << sse.head().describe();
  return sse.drain();
}

std::string tool_output(const std::vector<SseEvent>& events) {
  for (const auto& e : events) {
    if (e.event == "tool_result") return e.json().value("content", "");
  }
  return "";
}

TEST_F(ServeClusterWorkspace, ASessionMovingToAnotherNodeKeepsItsFiles) {
  const fs::path shared = dir_.path() / "shared-ws";
  const fs::path config = write_config(shared);
  ServeProcess a, b;
  ASSERT_TRUE(start(a, config, "node-a")) << a.error();
  auto wrote = say(a.port(), "write notes");
  ASSERT_EQ(wrote.back().event, "run_end") << wrote.back().data;
  EXPECT_TRUE(fs::exists(shared / "local" / "s1" / "notes.txt"));
  // Node A is gone: the session's next run can only land on B, with its own data dir.
  ASSERT_TRUE(a.stop().has_value());
  ASSERT_TRUE(start(b, config, "node-b")) << b.error();
  auto read = say(b.port(), "read notes");
  EXPECT_THAT(tool_output(read), HasSubstr("shared hello"))
      << ::testing::PrintToString(names(read));
  b.stop();
}

TEST_F(ServeClusterWorkspace, ANodeThatCannotReachTheSharedDirectoryRefusesToStart) {
  dir_.write("not-a-dir", "x");
  const fs::path config = write_config(dir_.path() / "not-a-dir" / "ws");
  ServeProcess node;
  ASSERT_FALSE(start(node, config, "node-x"));
  const std::string log = slurp(dir_.path() / "node-x.stderr");
  EXPECT_THAT(log, HasSubstr("serve.workspaces"));
  EXPECT_THAT(log, HasSubstr((dir_.path() / "not-a-dir" / "ws").string()));
  EXPECT_THAT(log, HasSubstr("refusing to start"));
}

}  // namespace
