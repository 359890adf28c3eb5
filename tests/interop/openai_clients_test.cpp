// Clients nobody here wrote, unchanged, against `kernex serve` on a loopback fake model: the
// official `openai` npm client (6.x), LangChain JS (`@langchain/openai` 1.x) and the request
// pattern of a chat UI (cmake/KernexNpm.cmake pins them; the mcp_npm fixture installs them).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "serve_harness.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;

const Json kPerson{{"name", "Ada"}, {"age", 36}};

// The fake model's script: a tool's result is read back, structured output (response_format or a
// forced function) is a person, a weather question calls get_weather, "a long story" is streamed
// a chunk and then held until the caller hangs up; anything else is echoed.
FakeLlm::Plan scripted(const FakeLlm::Request& r) {
  const Json& b = r.body;
  const Json& last = b["messages"].back();
  const auto call = [](const std::string& name, const Json& args) {
    FakeLlm::Plan p{{""}};
    p.tool_calls =
        Json::array({{{"id", "call_" + name}, {"name", name}, {"arguments", args.dump()}}});
    return p;
  };
  if (last.value("role", "") == "tool") return {{"The tool said: " + content_text(last)}};
  if (b.contains("response_format") && b["response_format"].value("type", "") == "json_schema")
    return {{kPerson.dump()}};
  if (b.contains("tool_choice") && b["tool_choice"].is_object())
    return call(b["tool_choice"]["function"].value("name", ""), kPerson);
  const std::string u = r.last_user();
  const bool has_weather =
      b.contains("tools") && b["tools"].dump().find("get_weather") != std::string::npos;
  if (has_weather && u.find("weather in ") != std::string::npos) {
    const std::string city = u.substr(u.find("weather in ") + 11);
    return call("get_weather", {{"city", city.substr(0, city.find('?'))}});
  }
  if (u.find("a long story") != std::string::npos) {
    FakeLlm::Plan p{{"Once ", "upon ", "a time"}};
    p.hold_after = 1;
    return p;
  }
  return {{"echo: " + u}};
}

struct ClientWorld {
  FakeLlm llm;
  ServeWorld w;
  std::mutex mutex;
  std::vector<Json> bodies;

  ClientWorld() {
    llm.set_responder([this](const FakeLlm::Request& r) {
      {
        std::lock_guard lock(mutex);
        bodies.push_back(r.body);
      }
      return scripted(r);
    });
    w.write_config(ServeWorld::openai_provider(llm));
  }
  // Runs tests/interop/<script> with node from the npm prefix (ESM resolves packages there).
  Json run(const std::string& script) {
    const fs::path copy = fs::path(KERNEX_NPM_DIR) / ("kernex_" + script);
    fs::copy_file(KERNEX_SOURCE_DIR "/tests/interop/" + script, copy,
                  fs::copy_options::overwrite_existing);
    auto o = run_program(KERNEX_NODE,
                         {copy.string(), "http://127.0.0.1:" + std::to_string(w.port()) + "/v1"},
                         w.dir.path());
    EXPECT_EQ(o.exit_code, 0) << o.out << o.err << "\nserver log:\n" << w.log();
    Json seen = Json::parse(o.out, nullptr, false);
    EXPECT_TRUE(seen.is_object()) << o.out << o.err;
    return seen.is_object() ? seen : Json::object();
  }
  std::vector<Json> seen() {
    std::lock_guard lock(mutex);
    return bodies;
  }
};

TEST(OpenAiClients, OfficialOpenAiSdkSix) {
  ClientWorld c;
  ASSERT_TRUE(c.w.start());
  Json out = c.run("openai_sdk_chat.mjs");
  EXPECT_EQ(out["plain"]["content"], "echo: hello there");
  EXPECT_EQ(out["plain"]["finish_reason"], "stop");
  EXPECT_EQ(out["plain"]["usage"]["total_tokens"], 8);
  EXPECT_EQ(out["stream"]["text"], "echo: stream please");
  EXPECT_EQ(out["stream"]["finish_reason"], "stop");
  EXPECT_TRUE(out["stream"]["usage"].is_object());
  EXPECT_EQ(out["tool_round"]["finish_reason"], "tool_calls");
  ASSERT_EQ(out["tool_round"]["calls"].size(), 1u) << out.dump();
  EXPECT_EQ(out["tool_round"]["calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(out["tool_round"]["answer"], "The tool said: sunny in Paris");
  EXPECT_EQ(out["tool_round"]["final_finish"], "stop");
  ASSERT_EQ(out["tool_stream"]["calls"].size(), 1u) << out.dump();
  EXPECT_EQ(Json::parse(out["tool_stream"]["calls"][0]["arguments"].get<std::string>()),
            Json({{"city", "Oslo"}}));
  EXPECT_EQ(out["tool_stream"]["finish_reason"], "tool_calls");
  EXPECT_EQ(out["structured"], kPerson);
  EXPECT_EQ(out["abort"]["status"], "cancelled") << out["abort"].dump();
  EXPECT_EQ(out["n2"]["status"], 400);
  EXPECT_EQ(out["n2"]["param"], "n");
  // The sampling fields of the first request reached the model.
  auto seen = c.seen();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen[0]["temperature"], 0.2);
  EXPECT_EQ(seen[0]["max_tokens"], 50);
  EXPECT_EQ(seen[0]["seed"], 7);
  EXPECT_EQ(seen[0]["stop"], Json::array({"END"}));
}

// The tools round trip across kill -9 of the server: the turn parked on the client's tool call
// (after the agent's own `write`, call w1) is durable, so the follow-up the client sends to the
// restarted server goes on from it, w1's result included.
TEST(OpenAiClients, OfficialOpenAiSdkToolRoundTripSurvivesKillNine) {
  ClientWorld c;
  c.llm.set_responder([&c](const FakeLlm::Request& r) {
    {
      std::lock_guard lock(c.mutex);
      c.bodies.push_back(r.body);
    }
    const Json& last = r.body["messages"].back();
    FakeLlm::Plan p{{""}};
    if (last.value("role", "") == "user") {
      p.tool_calls = Json::array({{{"id", "w1"},
                                   {"name", "write"},
                                   {"arguments", R"({"file_path":"n.txt","content":"x"})"}}});
    } else if (last.value("tool_call_id", "") == "w1") {
      p.tool_calls = Json::array(
          {{{"id", "call_o1"}, {"name", "get_weather"}, {"arguments", R"({"city":"Oslo"})"}}});
    } else {
      p.chunks = {"The tool said: " + content_text(last)};
    }
    return p;
  });
  c.w.write_config(ServeWorld::openai_provider(c.llm), "", "toolboxes:\n  - files\n");
  ASSERT_TRUE(c.w.start());
  const fs::path script = fs::path(KERNEX_NPM_DIR) / "kernex_openai_sdk_parked.mjs";
  fs::copy_file(KERNEX_SOURCE_DIR "/tests/interop/openai_sdk_parked.mjs", script,
                fs::copy_options::overwrite_existing);
  const std::string state = (c.w.dir.path() / "conversation.json").string();
  auto phase = [&](const std::string& name) {
    auto o = run_program(
        KERNEX_NODE,
        {script.string(), "http://127.0.0.1:" + std::to_string(c.w.port()) + "/v1", state, name},
        c.w.dir.path());
    EXPECT_EQ(o.exit_code, 0) << o.out << o.err << "\nserver log:\n" << c.w.log();
    Json seen = Json::parse(o.out, nullptr, false);
    return seen.is_object() ? seen : Json::object();
  };
  Json asked = phase("ask");
  EXPECT_EQ(asked["finish_reason"], "tool_calls") << asked.dump();
  ASSERT_EQ(asked["calls"].size(), 1u) << asked.dump();
  ASSERT_TRUE(c.w.server.kill9());
  ASSERT_TRUE(c.w.start());
  Json answered = phase("answer");
  EXPECT_EQ(answered["answer"], "The tool said: sunny in Oslo") << answered.dump();
  EXPECT_EQ(answered["finish_reason"], "stop");
  auto seen = c.seen();
  ASSERT_FALSE(seen.empty());
  bool own_result = false;
  for (const auto& m : seen.back()["messages"])
    own_result =
        own_result || (m.value("role", "") == "tool" && m.value("tool_call_id", "") == "w1");
  EXPECT_TRUE(own_result) << "the parked turn, w1 included: " << seen.back()["messages"].dump();
}

TEST(OpenAiClients, LangChainOpenAi) {
  ClientWorld c;
  ASSERT_TRUE(c.w.start());
  Json out = c.run("langchain_chat.mjs");
  EXPECT_EQ(out["plain"], "echo: hello there");
  EXPECT_EQ(out["streamed"], "echo: stream please");
  ASSERT_EQ(out["tool_calls"].size(), 1u) << out.dump();
  EXPECT_EQ(out["tool_calls"][0]["name"], "get_weather");
  EXPECT_EQ(out["tool_calls"][0]["args"], Json({{"city", "Paris"}}));
  EXPECT_EQ(out["tool_message_type"], "ToolMessage");
  EXPECT_EQ(out["after_tool"], "The tool said: sunny in Paris");
  EXPECT_EQ(out["structured"], kPerson);
  EXPECT_EQ(out["structured_tools"], kPerson);
  EXPECT_EQ(out["history"], "echo: thanks, and now?");
}

TEST(OpenAiClients, ChatUiPattern) {
  ClientWorld c;
  ASSERT_TRUE(c.w.start());
  Json out = c.run("chat_ui.mjs");
  EXPECT_EQ(out["parallel"]["answer"], 200) << out.dump();
  EXPECT_EQ(out["parallel"]["title"], 200) << "a title request beside the answer, same user";
  EXPECT_EQ(out["regenerate"]["status"], 200);
  EXPECT_EQ(out["second"], 200);
  EXPECT_EQ(out["edit"]["status"], 200);
  EXPECT_EQ(out["edit"]["text"], "echo: And about Zig?");
  EXPECT_EQ(out["stop"]["status"], "cancelled") << out.dump();
  EXPECT_EQ(out["after_stop"], 200) << "the next message after a stop is not refused";
  // What the model saw: the client's messages, never history piled up by regenerate or edit.
  std::vector<Json> rust, zig;
  for (const auto& b : c.seen()) {
    std::size_t users = 0;
    for (const auto& m : b["messages"]) users += m.value("role", "") == "user" ? 1 : 0;
    const std::string last = b["messages"].back().value("content", "");
    if (last == "Tell me about Rust") {
      EXPECT_EQ(users, 1u) << b.dump();
      rust.push_back(b["messages"]);
    }
    if (last == "And about Zig?") {
      EXPECT_EQ(users, 2u) << b.dump();
      EXPECT_EQ(b["messages"].dump().find("And about Go?"), std::string::npos)
          << "the edit replaced it";
    }
  }
  ASSERT_EQ(rust.size(), 2u);
  EXPECT_EQ(rust[0], rust[1]) << "regenerate sends the same conversation";
}

}  // namespace
