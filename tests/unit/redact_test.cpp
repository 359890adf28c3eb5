// Key redaction by pieces: what survives a cut, a cap or an escape of a key is still redacted.
#include <gtest/gtest.h>

#include <string>

#include "kernex/redact.hpp"

namespace {

const std::string kKey = "sk-proj-Zq8vX2mN4bR7tY1wK9pL3sD6fG0hJ5cV";

// Whether any kSecretPieceMin-byte piece of `secret` appears in `text`.
bool leaks(const std::string& text, const std::string& secret) {
  for (std::size_t i = 0; i + kernex::kSecretPieceMin <= secret.size(); ++i)
    if (text.find(secret.substr(i, kernex::kSecretPieceMin)) != std::string::npos) return true;
  return false;
}

TEST(Redact, WholeKeyAndEveryPieceOfAtLeastEightBytes) {
  EXPECT_EQ(kernex::redact("key=" + kKey + ".", kKey), "key=[REDACTED].");
  for (std::size_t len = kernex::kSecretPieceMin; len < kKey.size(); ++len) {
    const std::string prefix = "cut: " + kKey.substr(0, len) + " [... 10 bytes truncated]";
    const std::string suffix = "tail " + kKey.substr(kKey.size() - len);
    EXPECT_FALSE(leaks(kernex::redact(prefix, kKey), kKey)) << len;
    EXPECT_FALSE(leaks(kernex::redact(suffix, kKey), kKey)) << len;
  }
}

TEST(Redact, ShortRunsAndOtherTextAreKept) {
  // Seven bytes of the key are common text, not a piece: kept.
  EXPECT_EQ(kernex::redact("sk-proj is a prefix", kKey), "sk-proj is a prefix");
  EXPECT_EQ(kernex::redact("nothing here", kKey), "nothing here");
  EXPECT_EQ(kernex::redact("x", ""), "x");
  // A key shorter than a piece is replaced whole, as before.
  EXPECT_EQ(kernex::redact("a abc b", "abc"), "a [REDACTED] b");
}

TEST(Redact, RepeatedAndEscapedKeysAndPiecesAcrossEscapes) {
  std::string many;
  for (int i = 0; i < 50; ++i) many += kKey + (i % 2 ? "" : ",");
  EXPECT_FALSE(leaks(kernex::redact(many, kKey), kKey));
  // A JSON \u escape in the middle leaves two runs of the key, each redacted.
  const std::string escaped = "\\u0073" + kKey.substr(1, 15) + "\\u0041" + kKey.substr(17);
  EXPECT_FALSE(leaks(kernex::redact(escaped, kKey), kKey));
}

TEST(Redact, RegisteredSecretsAreRedactedBySinks) {
  const std::string other = "AIzaSyD-registered-only-here-123456";
  EXPECT_EQ(kernex::redact_secrets("x " + other), "x " + other);
  kernex::register_secret(other);
  kernex::register_secret("short");  // under a piece: not kept, so "short" stays readable
  EXPECT_EQ(kernex::redact_secrets("x " + other.substr(0, 12) + " short"), "x [REDACTED] short");
}

}  // namespace

namespace {

// Protocol text keeps its shape: a key ending in `approvals` leaves the field `approvals`, ids and
// SSE lines alone; inside string values the whole key and long pieces of it still go.
TEST(Redact, ProtocolTextKeepsFieldNamesAndRedactsOnlyValues) {
  const std::string key = "sk-live-Qw3rTy7uIo9pAs2dFg5hJk8lapprovals";
  kernex::register_secret(key);
  const std::string body = R"({"approvals": [], "id": "run-approvals", "error": "bad key )" + key +
                           R"(",)" + R"( "cut": "prefix )" + key.substr(0, 20) +
                           R"(", "short": "a )" + key.substr(0, 9) + "\"}";
  EXPECT_EQ(kernex::redact_secrets_in_json(body),
            R"({"approvals": [], "id": "run-approvals", "error": "bad key [REDACTED]",)"
            R"( "cut": "prefix [REDACTED]", "short": "a sk-live-Q"})");
  const std::string sse = "event: approvals\nid: 7\ndata: {\"approvals\":\"" + key + "\"}\n\n";
  EXPECT_EQ(kernex::redact_secrets_in_json(sse),
            "event: approvals\nid: 7\ndata: {\"approvals\":\"[REDACTED]\"}\n\n");
  // Escaped quotes inside a value do not end it; an unclosed string is left as it is.
  EXPECT_EQ(kernex::redact_secrets_in_json(R"({"a": "\"q\" )" + key + R"("})"),
            R"({"a": "\"q\" [REDACTED]"})");
  EXPECT_EQ(kernex::redact_secrets_in_json("{\"a\": \"approvals"), "{\"a\": \"approvals");
}

// Attacks on protocol structure: a key whose tail is a long field name, an SSE event type, an id
// or a metrics label changes none of them; the same key whole, anywhere, still goes.
TEST(Redact, AKeyEndingInProtocolTextNeverChangesItsStructure) {
  const std::string id = "resp_0f3a9c2b7d1e4f60a8b5c3d2e1f0a9b8";
  const std::string keys[] = {"sk-proj-Zx81mNq4Lw0vBt6Rc2Yp-completion_tokens_details",
                              "sk-proj-Hj27kLp9Qe4rTy6Ui1Op-response.output_text.delta",
                              "sk-proj-Gf5dSa3qWe8rTy1Ui6Op-" + id,
                              "sk-proj-Mn4bVc7xZl2kJh9gFd3s-tenant-with-a-long-name"};
  for (const auto& k : keys) kernex::register_secret(k);
  const std::string body = R"({"id": ")" + id +
                           R"(", "object": "chat.completion", "previous_response_id": ")" + id +
                           R"(", "usage": {"completion_tokens_details": {"reasoning_tokens": 0}}})";
  EXPECT_EQ(kernex::redact_secrets_in_json(body), body);
  const std::string sse =
      "event: response.output_text.delta\nid: 3\ndata: {\"type\":\"response.output_text.delta\","
      "\"item_id\":\"" +
      id + "\",\"delta\":\"hi\"}\n\n";
  EXPECT_EQ(kernex::redact_secrets_in_json(sse), sse);
  // The exposition format: a stray quote in a HELP text pairs with nothing on later lines.
  const std::string metrics =
      "# HELP kernex_runs runs \"started\n# TYPE kernex_runs counter\n"
      "kernex_runs{tenant=\"tenant-with-a-long-name\"} 3\n";
  EXPECT_EQ(kernex::redact_secrets_in_json(metrics), metrics);
  EXPECT_EQ(kernex::redact_secrets_in_json("# HELP x a \"quote\n{\"error\": \"" + keys[3] + "\"}"),
            "# HELP x a \"quote\n{\"error\": \"[REDACTED]\"}");
  // A whole key is a leak wherever it is: a field name, an id, a label; a long piece in prose too.
  EXPECT_EQ(kernex::redact_secrets_in_json("{\"" + keys[0] + "\": 1, \"id\": \"" + keys[2] +
                                           "\", \"text\": \"x " + keys[1].substr(0, 20) + "\"}"),
            R"({"[REDACTED]": 1, "id": "[REDACTED]", "text": "x [REDACTED]"})");
  EXPECT_EQ(kernex::redact_secrets_in_json("k{tenant=\"" + keys[3] + "\"} 1"),
            "k{tenant=\"[REDACTED]\"} 1");
  // The kernel's files (trajectories, the audit log) redact 8-byte pieces of values, and still
  // keep their field names and ids.
  const std::string line = R"({"type":"tool_result","call_id":")" + id +
                           R"(","completion_tokens_details":1,"error":"cut )" +
                           keys[0].substr(0, 9) + "\"}";
  EXPECT_EQ(kernex::redact_secrets_in_json(line, kernex::kSecretPieceMin),
            R"({"type":"tool_result","call_id":")" + id +
                R"(","completion_tokens_details":1,"error":"cut [REDACTED]"})");
}

}  // namespace
