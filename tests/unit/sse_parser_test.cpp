// Incremental SSE and NDJSON parsing: events must come out the same however the bytes are split.
#include <gtest/gtest.h>

#include "kernex/http/sse.hpp"

namespace {

using kernex::http::LineSplitter;
using kernex::http::SseEvent;
using kernex::http::SseParser;

std::vector<SseEvent> parse_all(std::string_view text, std::size_t step) {
  SseParser parser;
  std::vector<SseEvent> out;
  for (std::size_t i = 0; i < text.size(); i += step) {
    auto r = parser.feed(text.substr(i, step), [&](const SseEvent& e) { out.push_back(e); });
    EXPECT_TRUE(r) << r.error().message;
  }
  return out;
}

TEST(SseParser, AnthropicStyleEventsWithNames) {
  const std::string text =
      "event: message_start\ndata: {\"type\":\"message_start\"}\n\n"
      "event: ping\ndata: {\"type\": \"ping\"}\n\n";
  for (std::size_t step : {1u, 2u, 7u, 1000u}) {
    auto events = parse_all(text, step);
    ASSERT_EQ(events.size(), 2u) << "step " << step;
    EXPECT_EQ(events[0].event, "message_start");
    EXPECT_EQ(events[0].data, "{\"type\":\"message_start\"}");
    EXPECT_EQ(events[1].event, "ping");
  }
}

TEST(SseParser, CrlfAndBareCrLineEnds) {
  for (std::size_t step : {1u, 3u, 100u}) {
    auto events = parse_all("data: a\r\n\r\ndata: b\r\rdata:c\n\n", step);
    ASSERT_EQ(events.size(), 3u) << "step " << step;
    EXPECT_EQ(events[0].data, "a");
    EXPECT_EQ(events[1].data, "b");
    EXPECT_EQ(events[2].data, "c");  // no space after the colon
  }
}

TEST(SseParser, MultiLineDataCommentsAndIds) {
  auto events = parse_all(": keep-alive\nid: 7\ndata: one\ndata:  two\nretry: 10\n\n", 5);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "one\n two");  // only one leading space is stripped
  EXPECT_EQ(events[0].id, "7");
  EXPECT_EQ(events[0].event, "");
}

TEST(SseParser, BlankLinesWithoutDataDispatchNothing) {
  auto events = parse_all("\n\nevent: x\n\n: c\n\n", 1);
  EXPECT_TRUE(events.empty());
}

TEST(SseParser, StripsALeadingByteOrderMark) {
  auto events = parse_all(
      "\xEF\xBB\xBF"
      "data: x\n\n",
      1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "x");
}

TEST(SseParser, ReportsACutStream) {
  SseParser parser;
  int count = 0;
  ASSERT_TRUE(parser.feed("data: {\"a\":1}\n\ndata: {\"b\"", [&](const SseEvent&) { ++count; }));
  EXPECT_EQ(count, 1);
  EXPECT_TRUE(parser.has_partial());
  SseParser whole;
  ASSERT_TRUE(whole.feed("data: 1\n\n", [](const SseEvent&) {}));
  EXPECT_FALSE(whole.has_partial());
  SseParser unterminated;  // the line is complete but the event has no blank line yet
  ASSERT_TRUE(unterminated.feed("data: 1\n", [](const SseEvent&) {}));
  EXPECT_TRUE(unterminated.has_partial());
}

TEST(SseParser, CapsLinesAndEvents) {
  SseParser parser(/*max_line=*/16, /*max_event=*/32);
  auto r = parser.feed(std::string(40, 'x'), [](const SseEvent&) {});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("longer than 16"), std::string::npos);
  SseParser events(16, 20);
  auto r2 = events.feed("data: 0123456789\ndata: 0123456789\n", [](const SseEvent&) {});
  ASSERT_FALSE(r2);
  EXPECT_NE(r2.error().message.find("larger than 20"), std::string::npos);
}

TEST(LineSplitter, SplitsNdjsonAcrossChunks) {
  LineSplitter splitter;
  std::vector<std::string> lines;
  auto add = [&](std::string_view l) { lines.emplace_back(l); };
  ASSERT_TRUE(splitter.feed("{\"a\":1}\n{\"b\"", add));
  ASSERT_TRUE(splitter.feed(":2}\r\n\n  \n{\"c\":3}", add));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "{\"a\":1}");
  EXPECT_EQ(lines[1], "{\"b\":2}");
  EXPECT_TRUE(splitter.has_partial());
  EXPECT_EQ(splitter.take_rest(), "{\"c\":3}");
  EXPECT_FALSE(splitter.has_partial());
}

TEST(LineSplitter, CapsLines) {
  LineSplitter splitter(8);
  auto r = splitter.feed("0123456789", [](std::string_view) {});
  EXPECT_FALSE(r);
}

}  // namespace
