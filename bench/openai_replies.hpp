// The chat-completions replies the benches' fake model gives: a text answer or one tool call,
// with the usage a bench wants its turns charged.
#pragma once

#include <string>

#include "../tests/support/fake_http_server.hpp"
#include "kernex/json.hpp"

namespace kernex::bench {

struct ReplyUsage {
  int prompt_tokens = 5;
  int completion_tokens = 1;
};

inline Json openai_completion(Json message, const char* finish_reason, ReplyUsage usage) {
  return {{"id", "chatcmpl-bench"},
          {"object", "chat.completion"},
          {"model", "gpt-4o-mini"},
          {"choices",
           {{{"index", 0}, {"message", std::move(message)}, {"finish_reason", finish_reason}}}},
          {"usage",
           {{"prompt_tokens", usage.prompt_tokens},
            {"completion_tokens", usage.completion_tokens},
            {"total_tokens", usage.prompt_tokens + usage.completion_tokens}}}};
}

inline test::FakeHttpServer::Reply openai_text(const std::string& text, ReplyUsage usage = {}) {
  const Json body = openai_completion({{"role", "assistant"}, {"content", text}}, "stop", usage);
  return test::FakeHttpServer::json(200, body.dump());
}

inline test::FakeHttpServer::Reply openai_tool_call(const std::string& name, const Json& arguments,
                                                    ReplyUsage usage = {}) {
  const Json call = {{"id", "call_1"},
                     {"type", "function"},
                     {"function", {{"name", name}, {"arguments", arguments.dump()}}}};
  const Json body = openai_completion(
      {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}}, "tool_calls", usage);
  return test::FakeHttpServer::json(200, body.dump());
}

}  // namespace kernex::bench
