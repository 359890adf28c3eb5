// What the fake LLM needs of a chat request (`stream`, the last user message's text), read in one
// SAX pass that builds nothing for the rest: kernex's requests carry every tool's JSON Schema, and
// parsing those into a DOM was about half the harness's CPU in a burst, taken from the 2 CPUs the
// server under test runs on (a real model parses on its own machines).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kernex::bench {

struct ChatRequestScan {
  bool stream = false;
  std::string last_user_message;  // string content, or its {type:"text"} parts joined
};

// Nothing when `body` is not a JSON object.
std::optional<ChatRequestScan> scan_chat_request(std::string_view body);

}  // namespace kernex::bench
