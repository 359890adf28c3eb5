// `kernex serve` with the official `openai` npm client (pinned in cmake/KernexNpm.cmake): chat
// completions buffered and streamed, a session through X-Session-Id, models.list and error mapping.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "serve_harness.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;

TEST(ServeOpenAi, OfficialClientTalksToKernexServe) {
  ServeWorld w;
  std::string script = replay_text("first answer") + replay_text("streamed answer") +
                       replay_text("one") + replay_text("two") + replay_text("spare");
  w.write_config(w.replay_provider(script));
  ASSERT_TRUE(w.start());
  // ESM resolves packages next to the script, so it runs from the npm prefix.
  const fs::path client = fs::path(KERNEX_NPM_DIR) / "kernex_serve_openai_client.mjs";
  fs::copy_file(KERNEX_SOURCE_DIR "/tests/serve/openai_client.mjs", client,
                fs::copy_options::overwrite_existing);
  auto o = run_program(
      KERNEX_NODE,
      {client.string(), "http://127.0.0.1:" + std::to_string(w.port()) + "/v1", "sk-test"},
      w.dir.path());
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err << "\nserver log:\n" << w.log();
  Json seen = Json::parse(o.out, nullptr, false);
  ASSERT_TRUE(seen.is_object()) << o.out;

  EXPECT_EQ(seen["plain"]["object"], "chat.completion");
  EXPECT_EQ(seen["plain"]["role"], "assistant");
  EXPECT_EQ(seen["plain"]["content"], "first answer");
  EXPECT_EQ(seen["plain"]["finish_reason"], "stop");
  EXPECT_TRUE(seen["plain"]["id"].is_string());
  EXPECT_TRUE(seen["plain"]["usage"].is_object()) << seen["plain"].dump();

  EXPECT_GE(seen["stream"]["chunks"].get<int>(), 1);
  EXPECT_EQ(seen["stream"]["text"], "streamed answer");
  EXPECT_EQ(seen["stream"]["objects"], Json::array({"chat.completion.chunk"}));
  EXPECT_EQ(seen["stream"]["finish_reason"], "stop");
  EXPECT_EQ(seen["stream"]["ids"].size(), 1u)
      << "every chunk of one completion carries the same id";

  ASSERT_TRUE(seen["models"].is_array() && !seen["models"].empty()) << seen.dump();
  EXPECT_EQ(seen["models"][0]["object"], "model");
  EXPECT_EQ(seen["models"][0]["owned_by"], "kernex");

  EXPECT_EQ(seen["bad_request"]["status"], 400) << seen["bad_request"].dump();
  EXPECT_EQ(seen["bad_request"]["name"], "BadRequestError");

  auto msgs = session_messages(w.port(), "npm-session");
  std::vector<std::string> texts;
  for (const auto& m : msgs) texts.push_back(content_text(m));
  EXPECT_EQ(texts, (std::vector<std::string>{"turn one", "one", "turn two", "two"}));
}

}  // namespace
