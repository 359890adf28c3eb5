// The typed field reader every config file goes through (kernex/config_fields.hpp): each check
// and its wording, on JSON values as serve sections and plugin options give them.
#include "kernex/config_fields.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>

namespace {

using kernex::Json;
using namespace kernex::config;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr std::array<std::string_view, 3> kPolicies{"reject", "enqueue", "interrupt"};
constexpr std::array kFields{
    Field{"threads", FieldType::Integer, "worker threads", "4", 1, 256},
    Field{"buffer_bytes", FieldType::Integer, "stream buffer", "65536", 4096, 1 << 20},
    Field{.name = "budget", .type = FieldType::Number, .number_min = 0, .number_max = 10},
    Field{.name = "if_busy", .type = FieldType::Enum, .choices = kPolicies},
    Field{"park", FieldType::Bool, "park approvals"},
};
constexpr Section kSection{"serve", kFields};

const Where kAt{"k.yaml", 3, "serve.x"};

std::string message(const auto& result) {
  EXPECT_FALSE(result.has_value());
  return result ? std::string() : result.error().message;
}

TEST(ConfigFields, WhereNamesFileLineAndPath) {
  EXPECT_EQ(kAt.str(), "k.yaml:3: serve.x");
  EXPECT_EQ(kAt.child("y", 7).str(), "k.yaml:7: serve.x.y");
  EXPECT_EQ(kAt.item(2).str(), "k.yaml:3: serve.x[2]");
  EXPECT_EQ((Where{"", 0, "serve"}).child("listen").str(), "serve.listen");
  EXPECT_EQ(field_error(Where{"f", 0, ""}, "bad").error().message, "f: bad");
  EXPECT_EQ(field_error(Where{"f", 0, ""}, "bad").error().code, kernex::ErrorCode::Config);
}

TEST(ConfigFields, UnknownKeysListTheKnownOnesAndSuggestTheNearest) {
  EXPECT_EQ(*known_key(kSection, "park", kAt), kSection.find("park"));
  const std::string e = message(known_key(kSection, "thraeds", kAt));
  EXPECT_THAT(e, HasSubstr("k.yaml:3: serve.x: unknown key (expected one of: threads, "));
  EXPECT_THAT(e, HasSubstr("did you mean `threads`?"));
  EXPECT_THAT(message(known_key(kSection, "colour", kAt)), Not(HasSubstr("did you mean")));
  // A huge key costs no quadratic work and gets no suggestion.
  EXPECT_THAT(message(known_key(kSection, std::string(100'000, 't'), kAt)),
              Not(HasSubstr("did you mean")));
}

TEST(ConfigFields, IntegersAreWholeAndInRange) {
  const Field& threads = *kSection.find("threads");
  EXPECT_EQ(**read_integer(threads, FieldValue::of(Json(8)), kAt), 8u);
  EXPECT_FALSE(*read_integer(threads, FieldValue::of(Json()), kAt));  // null: unset
  EXPECT_THAT(message(read_integer(threads, FieldValue::of(Json(0)), kAt)),
              HasSubstr("serve.x: must be positive"));
  EXPECT_THAT(message(read_integer(threads, FieldValue::of(Json(257)), kAt)),
              HasSubstr("expected a non-negative integer no larger than 256, got 257"));
  EXPECT_THAT(message(read_integer(threads, FieldValue::of(Json(-1)), kAt)),
              HasSubstr("expected a non-negative integer, got -1"));
  EXPECT_THAT(message(read_integer(threads, FieldValue::of(Json(2.5)), kAt)),
              HasSubstr("expected a non-negative integer, got 2.5"));
  EXPECT_THAT(message(read_integer(threads, FieldValue::of(Json("8")), kAt)),
              HasSubstr("expected a non-negative integer, got \"8\""));
  EXPECT_THAT(message(read_integer(threads, FieldValue::of(Json::array()), kAt)),
              HasSubstr("got a list"));
  EXPECT_THAT(message(read_integer(*kSection.find("buffer_bytes"), FieldValue::of(Json(100)), kAt)),
              HasSubstr("must be at least 4096"));
}

TEST(ConfigFields, NumbersAreFiniteAndInRange) {
  const Field& budget = *kSection.find("budget");
  EXPECT_EQ(**read_number(budget, FieldValue::of(Json(2.5)), kAt), 2.5);
  EXPECT_THAT(message(read_number(budget, FieldValue::of(Json(11)), kAt)),
              HasSubstr("expected a number in [0, 10], got 11"));
  EXPECT_THAT(message(read_number(budget, FieldValue::of(Json(std::nan(""))), kAt)),
              HasSubstr("got nan"));
  EXPECT_THAT(message(read_number(budget, FieldValue::of(Json(true)), kAt)),
              HasSubstr("expected a number in [0, 10], got true"));
}

TEST(ConfigFields, StringsBoolsAndEnums) {
  EXPECT_EQ(**read_string(FieldValue::of(Json("x")), kAt), "x");
  EXPECT_THAT(message(read_string(FieldValue::of(Json(5)), kAt)),
              HasSubstr("expected a string, got 5"));
  EXPECT_EQ(**read_bool(FieldValue::of(Json(false)), kAt), false);
  EXPECT_THAT(message(read_bool(FieldValue::of(Json("yes")), kAt)),
              HasSubstr("expected true or false, got \"yes\""));
  const Field& policy = *kSection.find("if_busy");
  EXPECT_EQ(**read_enum(policy, FieldValue::of(Json("interrupt")), kAt), 2u);
  EXPECT_THAT(message(read_enum(policy, FieldValue::of(Json("wait")), kAt)),
              HasSubstr("expected reject, enqueue or interrupt, got \"wait\""));
  EXPECT_THAT(message(read_enum(policy, FieldValue::of(Json::object()), kAt)),
              HasSubstr("expected a string, got a mapping"));
}

TEST(ConfigFields, DescribeListsEveryFieldWithItsRange) {
  const std::string table = describe(kSection);
  EXPECT_THAT(table, HasSubstr("| `serve.threads` | integer [1, 256] | 4 | worker threads |"));
  EXPECT_THAT(table, HasSubstr("| `serve.if_busy` | reject, enqueue or interrupt |"));
  EXPECT_THAT(table, HasSubstr("| `serve.budget` | a number in [0, 10] |"));
}

}  // namespace
