// Requests, responses, usage and stream accumulation: kernex's 4 message.rs and 5 stream.rs
// cases (adapted to this port's Response/Usage/StreamEvent shapes) plus the JSON rules.
#include "kernex/message.hpp"

#include "kernex/generation.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>
#include <set>

namespace kernex {
namespace {

using ::testing::HasSubstr;

std::string json_error(const Json& j) {
  try {
    (void)j.get<Request>();
  } catch (const Json::exception& e) {
    return e.what();
  }
  return "";
}

StreamEvent text(std::string s) {
  return {StreamEvent::Kind::TextDelta, std::move(s), {}, {}, {}, {}};
}
StreamEvent of(StreamEvent::Kind kind, std::string s = {}) {
  return {kind, std::move(s), {}, {}, {}, {}};
}

// --- kernex message.rs conformance (4) ---

TEST(Message, RequestFromText) {
  const auto r = Request::from_text("user-1", "hello");
  EXPECT_EQ(r.sender_id, "user-1");
  EXPECT_EQ(r.text, "hello");
  EXPECT_TRUE(r.attachments.empty());
  EXPECT_FALSE(r.sender_name);
  EXPECT_FALSE(r.reply_to);
  EXPECT_FALSE(r.source);
}

TEST(Message, ResponseDefault) {
  const Response r;
  EXPECT_TRUE(r.text.empty());
  EXPECT_TRUE(r.provider.empty());
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(r.usage, Usage{});
}

TEST(Message, RequestSerdeRoundTrip) {
  const auto r = Request::from_text("user-1", "hello");
  const auto back = Json::parse(Json(r).dump()).get<Request>();
  EXPECT_EQ(back.sender_id, "user-1");
  EXPECT_EQ(back.text, "hello");
  EXPECT_EQ(back.id, r.id);
  EXPECT_EQ(back.timestamp, r.timestamp);
}

TEST(Message, ResponseDefaultJsonSkipsEmptyOptionalParts) {
  const Json j = Response{};
  EXPECT_FALSE(j.contains("tool_calls"));
  EXPECT_FALSE(j.contains("thinking"));
  EXPECT_FALSE(j.contains("provider_state"));
  EXPECT_TRUE(j.contains("usage"));
}

// --- Request details ---

TEST(Message, RequestIdIsLowercaseUuidV4AndTimestampRfc3339Utc) {
  const std::regex uuid("^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$");
  const std::regex ts(R"(^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$)");
  std::set<std::string> ids;
  for (int i = 0; i < 200; ++i) {
    const auto r = Request::from_text("u", "t");
    EXPECT_TRUE(std::regex_match(r.id, uuid)) << r.id;
    EXPECT_TRUE(std::regex_match(r.timestamp, ts)) << r.timestamp;
    ids.insert(r.id);
  }
  EXPECT_EQ(ids.size(), 200u);
}

TEST(Message, RequestJsonDefaultsAndNulls) {
  const auto r =
      Json::parse(R"({"id":"67E55044-10B1-426F-9247-BB680E5FE0C8","sender_id":"s","text":"t",
                                 "timestamp":"2026-03-06T12:00:00+01:00"})")
          .get<Request>();
  EXPECT_EQ(r.id, "67e55044-10b1-426f-9247-bb680e5fe0c8");
  EXPECT_FALSE(r.sender_name);
  EXPECT_TRUE(r.attachments.empty());
  const Json j = r;
  EXPECT_TRUE(j.at("sender_name").is_null());  // serialized as null, like serde's Option
  EXPECT_TRUE(j.at("reply_to").is_null());
  EXPECT_TRUE(j.at("source").is_null());
  EXPECT_EQ(j.at("attachments"), Json::array());
}

TEST(Message, AttachmentsRoundTrip) {
  Request r = Request::from_text("u", "see file");
  r.attachments.push_back(
      {"Image", "https://x/y.png", std::vector<std::uint8_t>{0, 127, 255}, "y.png"});
  r.attachments.push_back({});
  const Json j = r;
  EXPECT_EQ(j["attachments"][0]["data"], Json::parse("[0,127,255]"));
  EXPECT_EQ(j["attachments"][1]["file_type"], "Other");
  EXPECT_TRUE(j["attachments"][1]["url"].is_null());
  const auto back = j.get<Request>();
  ASSERT_EQ(back.attachments.size(), 2u);
  EXPECT_EQ(back.attachments[0].data, (std::vector<std::uint8_t>{0, 127, 255}));
  EXPECT_EQ(back.attachments[0].filename, "y.png");
}

TEST(Message, RequestJsonErrorsNameTheField) {
  const Json base =
      Json::parse(R"({"id":"67e55044-10b1-426f-9247-bb680e5fe0c8","sender_id":"s","text":"t",
                                    "timestamp":"2026-03-06T12:00:00Z"})");
  EXPECT_EQ(json_error(base), "");
  auto without = base;
  without.erase("text");
  EXPECT_THAT(json_error(without), HasSubstr("field 'text'"));
  auto bad_id = base;
  bad_id["id"] = "not-a-uuid";
  EXPECT_THAT(json_error(bad_id), HasSubstr("field 'id'"));
  auto bad_ts = base;
  bad_ts["timestamp"] = "yesterday";
  EXPECT_THAT(json_error(bad_ts), HasSubstr("field 'timestamp'"));
  auto bad_type = base;
  bad_type["attachments"] = Json::parse(R"([{"file_type":"Image"},{"file_type":"Picture"}])");
  EXPECT_THAT(json_error(bad_type), HasSubstr("field 'attachments[1].file_type'"));
  auto bad_byte = base;
  bad_byte["attachments"] = Json::parse(R"([{"file_type":"Image","data":[1,256]}])");
  EXPECT_THAT(json_error(bad_byte), HasSubstr("field 'attachments[0].data[1]'"));
  auto bad_sender = base;
  bad_sender["sender_id"] = 5;
  EXPECT_THAT(json_error(bad_sender), HasSubstr("field 'sender_id'"));
}

TEST(Message, UsageJsonAndTotals) {
  const Usage u{10, 5, 100, 7, 0.25};
  EXPECT_EQ(Json(u).get<Usage>(), u);
  EXPECT_EQ(Json::object().get<Usage>(), Usage{});
  EXPECT_EQ(u.total_tokens(), 122u);
  EXPECT_EQ(u.billed_tokens(), 22u);  // cache reads excluded for every provider
  Usage sum = u;
  sum += u;
  EXPECT_EQ(sum.total_tokens(), 244u);
  EXPECT_DOUBLE_EQ(sum.cost_usd, 0.5);
}

// --- kernex stream.rs conformance (5) ---

TEST(Stream, AccumulatesTextDeltas) {
  StreamAccumulator acc;
  acc.push(text("Hello"));
  acc.push(text(", world"));
  acc.push(of(StreamEvent::Kind::Done));
  EXPECT_EQ(acc.text(), "Hello, world");
}

TEST(Stream, ToolInputFragmentsAreNotText) {
  StreamAccumulator acc;
  acc.push(of(StreamEvent::Kind::ToolCallStart));
  acc.push(of(StreamEvent::Kind::ToolCallDelta, "{\"path\":"));
  acc.push(of(StreamEvent::Kind::ToolCallEnd));
  acc.push(of(StreamEvent::Kind::Done));
  EXPECT_EQ(acc.text(), "");
}

TEST(Stream, IntoText) {
  StreamAccumulator acc;
  acc.push(text("hi"));
  EXPECT_EQ(std::string(acc.text()), "hi");
}

TEST(Stream, ThinkingIsNotFoldedAndUsageIsKept) {
  StreamAccumulator acc;
  acc.push(of(StreamEvent::Kind::ThinkingDelta, "reasoning..."));
  acc.push(text("answer"));
  StreamEvent usage = of(StreamEvent::Kind::Usage);
  usage.usage = Usage{10, 5, 100, 0, 0};
  usage.stop_reason = "end_turn";
  acc.push(usage);
  acc.push(of(StreamEvent::Kind::Done));
  EXPECT_EQ(acc.text(), "answer");
  EXPECT_EQ(acc.total_tokens(), 115u);
  EXPECT_EQ(acc.stop_reason(), "end_turn");
  ASSERT_TRUE(acc.usage());
  EXPECT_EQ(acc.usage()->cache_read_tokens, 100u);
}

TEST(Stream, NoUsageMeansNoTotal) {
  StreamAccumulator acc;
  acc.push(text("x"));
  EXPECT_FALSE(acc.total_tokens());
  EXPECT_FALSE(acc.usage());
}

TEST(Stream, LastUsageReplacesEarlierOne) {
  StreamAccumulator acc;
  StreamEvent first = of(StreamEvent::Kind::Usage);
  first.usage = Usage{1, 1, 0, 0, 0};
  first.stop_reason = "tool_use";
  StreamEvent second = of(StreamEvent::Kind::Usage);
  second.usage = Usage{2, 3, 0, 0, 0};
  second.stop_reason = "end_turn";
  acc.push(first);
  acc.push(second);
  acc.push(of(StreamEvent::Kind::Error, "boom"));
  EXPECT_EQ(acc.total_tokens(), 5u);
  EXPECT_EQ(acc.stop_reason(), "end_turn");
  EXPECT_EQ(acc.text(), "");
}

// Untrusted JSON is refused past kMaxJsonDepth levels: parsing is iterative in nlohmann, but
// dump(), copies and comparisons recurse, so a deep document would overflow the stack wherever it
// went next.
TEST(UntrustedJson, NestingPastTheLimitIsRefusedAndStringsDoNotCount) {
  const std::size_t deep = 300000;
  EXPECT_TRUE(parse_untrusted(std::string(deep, '[') + std::string(deep, ']')).is_discarded());
  EXPECT_TRUE(
      parse_untrusted(std::string(kMaxJsonDepth + 1, '[') + std::string(kMaxJsonDepth + 1, ']'))
          .is_discarded());
  Json at_limit =
      parse_untrusted(std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']'));
  ASSERT_TRUE(at_limit.is_array());
  EXPECT_FALSE(at_limit.dump().empty());
  // Brackets inside strings, escaped quotes included, are text.
  const std::string text = R"({"a":")" + std::string(1000, '[') + R"(\"[[[","b":[{"c":"{{{"}]})";
  Json j = parse_untrusted(text);
  ASSERT_TRUE(j.is_object()) << text;
  EXPECT_EQ(j["b"][0]["c"], "{{{");
  EXPECT_TRUE(parse_untrusted("{\"a\":").is_discarded());
  EXPECT_TRUE(parse_untrusted("").is_discarded());
}

// nlohmann casts a float to an integer without a range check (undefined behaviour for 3.7e20 as
// uint64): integers from untrusted JSON are read through json_uint/json_int, uint_value and the
// json_fields readers, which refuse floats and out-of-range values with a typed error.
TEST(UntrustedJson, FloatsWhereIntegersBelongAreRefusedNotCast) {
  for (const char* text : {"3.7e20", "-1e300", "1.5", "1e19", "-1", "\"3\"", "true"}) {
    const Json v = Json::parse(text);
    EXPECT_FALSE(json_uint(v)) << text;
    EXPECT_THROW((void)uint_value(Json{{"n", v}}, "n"), Json::type_error) << text;
    Usage usage;
    EXPECT_THROW((usage = Json{{"input_tokens", v}}.get<Usage>()), Json::exception) << text;
    if (std::string(text) != "-1") {
      std::int64_t i = 0;
      EXPECT_THROW(json_fields::read(v, i), Json::exception) << text;
    }
  }
  EXPECT_EQ(json_uint(Json::parse("18446744073709551615")), 18446744073709551615ULL);
  EXPECT_FALSE(json_int(Json::parse("18446744073709551615")));
  EXPECT_EQ(json_int(Json::parse("-9223372036854775808")), INT64_MIN);
  EXPECT_EQ(uint_value(Json::object(), "n", 7), 7u);
  EXPECT_EQ(uint_value(Json{{"n", nullptr}}, "n", 7), 7u);
  std::int32_t small = 0;
  EXPECT_THROW(json_fields::read(Json(std::int64_t{1} << 40), small), Json::out_of_range);
  json_fields::read(Json(-5), small);
  EXPECT_EQ(small, -5);
}

// A generation read back from a run record or a context file is untrusted too.
TEST(UntrustedJson, GenerationRefusesFloatIntegersAndKeepsGoodOnes) {
  for (const char* text : {R"({"max_tokens": 3.7e20})", R"({"max_tokens": -1})",
                           R"({"seed": 1e300})", R"({"seed": 18446744073709551615})",
                           R"({"temperature": "hot"})", R"({"parallel_tool_calls": 1})"}) {
    Generation g;
    EXPECT_THROW(g = Json::parse(text).get<Generation>(), Json::exception) << text;
  }
  const auto g = Json::parse(R"({"max_tokens": 12, "seed": -3, "temperature": 1, "top_p": null})")
                     .get<Generation>();
  EXPECT_EQ(g.max_tokens, 12u);
  EXPECT_EQ(g.seed, -3);
  EXPECT_EQ(g.temperature, 1.0);
  EXPECT_FALSE(g.top_p);
}

}  // namespace
}  // namespace kernex
