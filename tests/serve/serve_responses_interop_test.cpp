// Issue 33: the Responses API and GET /v1/models/{id} with clients nobody here wrote, unchanged
// (tests/interop/responses_clients.mjs: `openai`, the AI SDK's `@ai-sdk/openai` and
// `@ai-sdk/openai-compatible`, LangChain's ChatOpenAI with useResponsesApi; pinned in
// cmake/KernexNpm.cmake), against `kernex serve` with a loopback fake model that echoes.
#include <gtest/gtest.h>

#include "serve_harness.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;

TEST(ServeResponsesInterop, ClientsNobodyHereWroteUseTheResponsesApi) {
  FakeLlm llm;
  llm.set_responder([](const FakeLlm::Request& r) {
    return FakeLlm::Plan{{"echo: ", r.last_user()}, std::nullopt};
  });
  ServeWorld w;
  w.write_config(ServeWorld::openai_provider(llm));
  ASSERT_TRUE(w.start());
  // ESM resolves packages next to the script, so it runs from the npm prefix.
  const fs::path script = fs::path(KERNEX_NPM_DIR) / "kernex_responses_clients.mjs";
  fs::copy_file(KERNEX_SOURCE_DIR "/tests/interop/responses_clients.mjs", script,
                fs::copy_options::overwrite_existing);
  auto o = run_program(
      KERNEX_NODE,
      {script.string(), "http://127.0.0.1:" + std::to_string(w.port()) + "/v1", "sk-test"},
      w.dir.path());
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err << "\nserver log:\n" << w.log();
  Json seen = Json::parse(o.out, nullptr, false);
  ASSERT_TRUE(seen.is_object()) << o.out << o.err;
  const std::string all = seen.dump();

  EXPECT_EQ(seen["openai_plain"]["object"], "response") << all;
  EXPECT_EQ(seen["openai_plain"]["status"], "completed") << all;
  EXPECT_EQ(seen["openai_plain"]["text"], "echo: plain question") << all;

  EXPECT_EQ(seen["openai_stream"]["text"], "echo: stream question") << all;
  EXPECT_EQ(seen["openai_stream"]["final_text"], "echo: stream question") << all;
  EXPECT_EQ(seen["openai_stream"]["final_status"], "completed") << all;
  const Json& types = seen["openai_stream"]["types"];
  for (const char* type : {"response.created", "response.in_progress", "response.output_item.added",
                           "response.output_text.delta", "response.output_text.done",
                           "response.output_item.done", "response.completed"})
    EXPECT_NE(std::find(types.begin(), types.end(), Json(type)), types.end()) << type << all;

  EXPECT_EQ(seen["openai_chain"]["text"], "echo: follow up") << all;
  EXPECT_EQ(seen["openai_chain"]["previous"], seen["openai_retrieve"]["id"]) << all;
  EXPECT_EQ(seen["openai_retrieve"]["text"], "echo: plain question") << all;

  EXPECT_EQ(seen["models_retrieve"]["id"], "kernex") << all;
  EXPECT_EQ(seen["models_retrieve"]["object"], "model") << all;
  EXPECT_EQ(seen["models_missing"]["status"], 404) << all;
  EXPECT_EQ(seen["models_missing"]["name"], "NotFoundError") << all;

  EXPECT_EQ(seen["ai_generate"]["text"], "echo: ai sdk question") << all;
  EXPECT_EQ(seen["ai_generate"]["finishReason"], "stop") << all;
  EXPECT_EQ(seen["ai_stream"]["text"], "echo: ai sdk stream") << all;
  EXPECT_EQ(seen["ai_stream"]["finishReason"], "stop") << all;
  EXPECT_EQ(seen["ai_compatible"]["text"], "echo: compatible question") << all;

  EXPECT_EQ(seen["langchain_responses"]["text"], "echo: langchain question") << all;
}

}  // namespace
