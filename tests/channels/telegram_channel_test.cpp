// The Telegram channel plugin (plugins/channel-telegram) hosted by kernex::channels against the
// loopback fake Bot API, which enforces Telegram's limits: every test also checks none was broken.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "telegram_harness.hpp"
#include "telegram_load.hpp"

namespace {

namespace fs = std::filesystem;
using kernex::Json;
using kernex::test::drip_answer;
using kernex::test::FakeBotApi;
using kernex::test::joined_texts;
using kernex::test::TelegramHarness;

constexpr std::int64_t kChat = 1001, kUser = 7;
const std::string kAllowed = "allowed_users: [7]";

void expect_within_limits(const FakeBotApi& bot) {
  const auto s = bot.stats();
  EXPECT_EQ(s.early_retries, 0u);
  EXPECT_EQ(s.too_long, 0u);
  EXPECT_EQ(s.not_modified, 0u);
  EXPECT_EQ(s.redelivered, 0u);
}

TEST(TelegramChannel, StreamsByCoalescedEditsAndDeliversTheWholeAnswer) {
  TelegramHarness h;
  ASSERT_TRUE(h.start(kAllowed, "{length: 700, chunk: 10, delay_ms: 25}"));
  h.bot().send_text(kChat, kUser, "hello");
  const std::string expected = drip_answer(0, "hello", 700);
  ASSERT_TRUE(h.wait_for_text(kChat, expected)) << joined_texts(h.bot().messages(kChat));
  const auto messages = h.bot().messages(kChat);
  ASSERT_EQ(messages.size(), 1u);
  // ~1.75 s of streaming: shown early and edited, at most about once a second.
  EXPECT_GE(messages[0].edits, 1);
  EXPECT_LE(messages[0].edits, 4);
  EXPECT_EQ(h.bot().stats().rate_limited, 0u);
  expect_within_limits(h.bot());
  EXPECT_TRUE(h.stop());
}

TEST(TelegramChannel, SplitsAnswersLongerThan4096Characters) {
  TelegramHarness h;
  ASSERT_TRUE(h.start(kAllowed, "{length: 10000, chunk: 700, delay_ms: 5}"));
  h.bot().send_text(kChat, kUser, "long");
  const std::string expected = drip_answer(0, "long", 10000);
  ASSERT_TRUE(h.wait_for_text(kChat, expected)) << joined_texts(h.bot().messages(kChat)).size();
  const auto messages = h.bot().messages(kChat);
  ASSERT_EQ(messages.size(), 3u);
  for (const auto& m : messages) {
    EXPECT_LE(m.text.size(), 4096u);
    EXPECT_EQ(m.text.back(), '\n');  // cut after a newline
  }
  EXPECT_EQ(h.bot().stats().rate_limited, 0u);
  expect_within_limits(h.bot());
}

TEST(TelegramChannel, HonoursRetryAfterOn429) {
  TelegramHarness h;
  h.bot().force_rate_limit(kChat, 1, 2);
  ASSERT_TRUE(h.start(kAllowed, "{length: 400, chunk: 10, delay_ms: 40}"));
  h.bot().send_text(kChat, kUser, "slow down");
  const std::string expected = drip_answer(0, "slow down", 400);
  ASSERT_TRUE(h.wait_for_text(kChat, expected)) << joined_texts(h.bot().messages(kChat));
  const auto s = h.bot().stats();
  EXPECT_EQ(s.rate_limited, 1u);  // the forced one only: the retry waited 2 s
  expect_within_limits(h.bot());
}

TEST(TelegramChannel, UpdatesAreNotHandledAgainAfterARestart) {
  TelegramHarness h;
  ASSERT_TRUE(h.start(kAllowed, "{length: 60, chunk: 60, delay_ms: 1}"));
  const auto first = h.bot().send_text(kChat, kUser, "first");
  ASSERT_TRUE(h.wait_for_text(kChat, drip_answer(0, "first", 60)));
  ASSERT_TRUE(h.stop());
  // The stored offset is past the handled update: the new process confirms it at once.
  std::ifstream state(h.dir() / "data/channels/telegram/state.json");
  const Json stored = Json::parse(state);
  EXPECT_EQ(stored["offset"], first + 1);

  ASSERT_TRUE(h.start(kAllowed, "{length: 60, chunk: 60, delay_ms: 1}"));
  const std::int64_t after = h.last_id(kChat);
  h.bot().send_text(kChat, kUser, "second");
  // Same session, so memory holds the first exchange (2 entries); the first was not answered again.
  ASSERT_TRUE(h.wait_for_text(kChat, drip_answer(2, "second", 60), after));
  EXPECT_EQ(h.bot().messages(kChat).size(), 2u);
  EXPECT_GT(h.bot().last_offset(), first);
  expect_within_limits(h.bot());
}

TEST(TelegramChannel, OnlyAllowedOrPairedUsersAreAnswered) {
  TelegramHarness h;
  ASSERT_TRUE(h.start("allowed_users: [7], pairing_code: sesame", "{length: 40, chunk: 40}"));
  constexpr std::int64_t kStranger = 99, kTheirChat = 2002;
  h.bot().send_text(kTheirChat, kStranger, "let me in");
  ASSERT_TRUE(
      h.wait_for_text(kTheirChat, "You may not use this bot. Send its pairing code to start."));
  auto after = h.last_id(kTheirChat);
  h.bot().send_text(kTheirChat, kStranger, "sesame");
  ASSERT_TRUE(h.wait_for_text(kTheirChat, "Paired: you can talk to me now.", after));
  ASSERT_TRUE(h.stop());
  // Remembered across a restart.
  ASSERT_TRUE(h.start("allowed_users: [7], pairing_code: sesame", "{length: 40, chunk: 40}"));
  after = h.last_id(kTheirChat);
  h.bot().send_text(kTheirChat, kStranger, "now?");
  ASSERT_TRUE(h.wait_for_text(kTheirChat, drip_answer(0, "now?", 40), after));
  expect_within_limits(h.bot());
}

// The paired users in state.json (written before the next update is handled).
std::vector<std::int64_t> paired_in(const fs::path& dir) {
  std::ifstream state(dir / "data/channels/telegram/state.json");
  return Json::parse(state)["paired"].get<std::vector<std::int64_t>>();
}

// An allowed user's message answered (`history`: entries its session held): every update before
// it was handled.
void sync(TelegramHarness& h, const std::string& text, int history = 0) {
  const auto after = h.last_id(kChat);
  h.bot().send_text(kChat, kUser, text);
  ASSERT_TRUE(h.wait_for_text(kChat, drip_answer(history, text, 20), after));
}

TEST(TelegramChannel, PairingAttemptsAreLimitedPerChatAcrossRestarts) {
  TelegramHarness h;
  const std::string options = "allowed_users: [7], pairing_code: sesame, pairing_attempts: 3";
  ASSERT_TRUE(h.start(options, "{length: 20, chunk: 20}"));
  constexpr std::int64_t kStranger = 99, kTheirChat = 2002;
  for (const char* guess : {"open", "please", "1234"})
    h.bot().send_text(kTheirChat, kStranger, guess);
  const std::string refusal = "You may not use this bot. Send its pairing code to start.";
  ASSERT_TRUE(h.wait_for_text(kTheirChat, refusal + refusal +
                                              "Too many attempts from this chat: try again in "
                                              "15 minutes."))
      << joined_texts(h.bot().messages(kTheirChat));
  // Locked: the right code now pairs nobody, and gets no answer.
  const auto locked_at = h.last_id(kTheirChat);
  h.bot().send_text(kTheirChat, kStranger, "sesame");
  ASSERT_NO_FATAL_FAILURE(sync(h, "after the code"));
  EXPECT_EQ(paired_in(h.dir()), std::vector<std::int64_t>{});
  ASSERT_TRUE(h.stop());
  // The count is durable: a restart does not give the chat new attempts.
  ASSERT_TRUE(h.start(options, "{length: 20, chunk: 20}"));
  h.bot().send_text(kTheirChat, kStranger, "sesame");
  ASSERT_NO_FATAL_FAILURE(sync(h, "after the restart", 2));
  EXPECT_EQ(paired_in(h.dir()), std::vector<std::int64_t>{});
  EXPECT_EQ(joined_texts(h.bot().messages(kTheirChat), locked_at), "");
  // Another chat has its own attempts.
  h.bot().send_text(3003, 55, "sesame");
  ASSERT_TRUE(h.wait_for_text(3003, "Paired: you can talk to me now."));
  EXPECT_EQ(paired_in(h.dir()), std::vector<std::int64_t>{55});
  expect_within_limits(h.bot());
}

std::size_t thread_count() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// Chats that may not talk share one worker: thirty strangers start no thread each.
TEST(TelegramChannel, StrangersGetNoWorkerOfTheirOwn) {
  TelegramHarness h;
  ASSERT_TRUE(h.start("allowed_users: [7], pairing_code: sesame", "{length: 20, chunk: 20}"));
  ASSERT_NO_FATAL_FAILURE(sync(h, "warm up"));
  // The first stranger starts the strangers' one worker (and the fake API its connection's).
  h.bot().send_text(4999, 899, "hello?");
  ASSERT_TRUE(h.wait_for_text(4999, "You may not use this bot. Send its pairing code to start."));
  const std::size_t before = thread_count();
  constexpr int kStrangers = 30;
  for (int i = 0; i < kStrangers; ++i) h.bot().send_text(5000 + i, 900 + i, "hello?");
  ASSERT_TRUE(h.bot().wait_until(
      [&] {
        for (int i = 0; i < kStrangers; ++i) {
          if (joined_texts(h.bot().messages(5000 + i)).empty()) return false;
        }
        return true;
      },
      std::chrono::seconds(60)));
  EXPECT_EQ(thread_count(), before) << "strangers' chats got threads";
  expect_within_limits(h.bot());
}

// state.json is the channel's, but read as untrusted: a bad pairing_failures field stops the
// channel with a Parse error naming the file; a file from before the limit loads.
TEST(TelegramChannel, AStateFileIsCheckedWhenRead) {
  TelegramHarness h;
  const fs::path dir = h.dir() / "data/channels/telegram";
  fs::create_directories(dir);
  std::ofstream(dir / "state.json")
      << R"({"offset": 0, "paired": [], "generations": {}, "pairing_failures": [[1, -2, 3]]})";
  ASSERT_TRUE(h.start(kAllowed, "{length: 20, chunk: 20}"));
  auto result = h.stop();
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, kernex::ErrorCode::Parse) << result.error().describe();
  EXPECT_NE(result.error().describe().find("state.json"), std::string::npos);
  std::ofstream(dir / "state.json") << R"({"offset": 0, "paired": [55], "generations": {}})";
  ASSERT_TRUE(h.start(kAllowed, "{length: 20, chunk: 20}"));
  ASSERT_NO_FATAL_FAILURE(sync(h, "old file"));
  EXPECT_EQ(paired_in(h.dir()), std::vector<std::int64_t>{55});
}

TEST(TelegramChannel, NewStartsAFreshSession) {
  TelegramHarness h;
  ASSERT_TRUE(h.start(kAllowed, "{length: 30, chunk: 30}"));
  h.bot().send_text(kChat, kUser, "one");
  ASSERT_TRUE(h.wait_for_text(kChat, drip_answer(0, "one", 30)));
  auto after = h.last_id(kChat);
  h.bot().send_text(kChat, kUser, "two");
  ASSERT_TRUE(h.wait_for_text(kChat, drip_answer(2, "two", 30), after));
  after = h.last_id(kChat);
  h.bot().send_text(kChat, kUser, "/new");
  h.bot().send_text(kChat, kUser, "three");
  ASSERT_TRUE(
      h.wait_for_text(kChat, "Started a new session." + drip_answer(0, "three", 30), after));
  expect_within_limits(h.bot());
}

TEST(TelegramChannel, GroupsCanHaveASessionPerPerson) {
  TelegramHarness h;
  ASSERT_TRUE(h.start("allowed_users: [7, 8], session_scope: user", "{length: 30, chunk: 30}"));
  constexpr std::int64_t kGroup = -5005;
  h.bot().send_text(kGroup, 7, "from seven", "group");
  ASSERT_TRUE(h.wait_for_text(kGroup, drip_answer(0, "from seven", 30)));
  const auto after = h.last_id(kGroup);
  h.bot().send_text(kGroup, 8, "from eight", "group");
  ASSERT_TRUE(h.wait_for_text(kGroup, drip_answer(0, "from eight", 30), after));
  expect_within_limits(h.bot());
}

// Asks for word_count, which an ask rule holds for a person's approval in the chat.
std::string approval_test(bool approve) {
  TelegramHarness h;
  EXPECT_TRUE(h.start(kAllowed,
                      "{length: 30, chunk: 30, tool: word_count, "
                      "tool_arguments: {text: 'a b c'}}",
                      "toolboxes: [builtin]\npermissions: {ask: [word_count]}\n"));
  h.bot().send_text(kChat, kUser, "count");
  std::optional<FakeBotApi::Message> prompt;
  EXPECT_TRUE(h.bot().wait_until(
      [&] {
        for (const auto& m : h.bot().messages(kChat))
          if (!m.reply_markup.is_null()) prompt = m;
        return prompt.has_value();
      },
      std::chrono::seconds(30)));
  if (!prompt) return {};
  EXPECT_NE(prompt->text.find("word_count"), std::string::npos) << prompt->text;
  const Json& row = prompt->reply_markup["inline_keyboard"][0];
  EXPECT_EQ(row.size(), 3u);
  const std::string data = row[approve ? 0 : 1]["callback_data"];
  h.bot().press_button(kChat, kUser, prompt->id, data);
  std::string answer;
  EXPECT_TRUE(h.bot().wait_until(
      [&] {
        answer = joined_texts(h.bot().messages(kChat), prompt->id);
        return answer.find("echo(0): count") != std::string::npos;
      },
      std::chrono::seconds(30)));
  EXPECT_EQ(h.bot().callback_answers(),
            std::vector<std::string>{approve ? "Approved." : "Denied."});
  expect_within_limits(h.bot());
  return answer;
}

// An approval pending when the channel stops is kept in state.json: the next process tells the
// chat its turn stopped, and a press of the old button is answered so, not as unknown.
TEST(TelegramChannel, AnApprovalPendingAtARestartIsToldAndItsButtonAnswered) {
  TelegramHarness h;
  const std::string drip = "{length: 30, chunk: 30, tool: word_count, tool_arguments: {text: 'a'}}";
  const std::string extra = "toolboxes: [builtin]\npermissions: {ask: [word_count]}\n";
  ASSERT_TRUE(h.start(kAllowed, drip, extra));
  h.bot().send_text(kChat, kUser, "count");
  std::optional<FakeBotApi::Message> prompt;
  ASSERT_TRUE(h.bot().wait_until(
      [&] {
        for (const auto& m : h.bot().messages(kChat))
          if (!m.reply_markup.is_null()) prompt = m;
        return prompt.has_value();
      },
      std::chrono::seconds(30)));
  ASSERT_TRUE(h.stop());
  std::ifstream file(h.dir() / "data/channels/telegram/state.json");
  const Json stored = Json::parse(file);
  ASSERT_EQ(stored["approvals"].size(), 1u) << stored.dump();
  EXPECT_EQ(stored["approvals"][0][2], "word_count");

  ASSERT_TRUE(h.start(kAllowed, drip, extra));
  const std::string told =
      "The bot restarted while your approval of word_count was pending: that turn stopped. Send "
      "your message again.";
  ASSERT_TRUE(h.bot().wait_until(
      [&] {
        return joined_texts(h.bot().messages(kChat), prompt->id).find(told) != std::string::npos;
      },
      std::chrono::seconds(30)))
      << joined_texts(h.bot().messages(kChat), prompt->id);
  const std::string data = prompt->reply_markup["inline_keyboard"][0][0]["callback_data"];
  h.bot().press_button(kChat, kUser, prompt->id, data);
  ASSERT_TRUE(h.bot().wait_until([&] { return !h.bot().callback_answers().empty(); },
                                 std::chrono::seconds(30)));
  EXPECT_EQ(h.bot().callback_answers(),
            std::vector<std::string>{
                "This request ended when the bot restarted: send your message again."});
  ASSERT_TRUE(h.stop());
  std::ifstream again(h.dir() / "data/channels/telegram/state.json");
  EXPECT_EQ(Json::parse(again)["approvals"], Json::array());
}

TEST(TelegramChannel, ApprovalByButtonRunsTheTool) {
  const std::string answer = approval_test(true);
  EXPECT_NE(answer.find("tool said: {"), std::string::npos) << answer;
  EXPECT_NE(answer.find("\"words\":3"), std::string::npos) << answer;
}

TEST(TelegramChannel, DenialByButtonKeepsTheToolFromRunning) {
  const std::string answer = approval_test(false);
  EXPECT_NE(answer.find("denied"), std::string::npos) << answer;
  EXPECT_EQ(answer.find("\"words\""), std::string::npos) << answer;
}

TEST(TelegramChannel, SentFilesLandInTheSessionWorkspace) {
  TelegramHarness h;
  ASSERT_TRUE(h.start(kAllowed, "{length: 10, chunk: 100}"));
  h.bot().send_document(kChat, kUser, "../notes.txt", "file body\n", "read this");
  std::string answer;
  ASSERT_TRUE(h.bot().wait_until(
      [&] {
        answer = joined_texts(h.bot().messages(kChat));
        return answer.find("echo(0)") != std::string::npos;
      },
      std::chrono::seconds(30)));
  EXPECT_NE(answer.find("read this\n[The user sent a file, saved as attachments/1-notes.txt"),
            std::string::npos)
      << answer;
  const fs::path file = h.dir() / "data/channel-workspaces/telegram" /
                        ("telegram%3A" + std::to_string(kChat) + "%3A0") / "attachments" /
                        "1-notes.txt";
  std::ifstream in(file);
  std::stringstream body;
  body << in.rdbuf();
  EXPECT_EQ(body.str(), "file body\n") << file;
}

// A tool of the session may write its workspace, attachments/ included: a symlink it plants
// where the next file will land (or in place of the folder) must not make the channel, which
// runs unsandboxed, write outside.
TEST(TelegramChannel, SentFilesNeverFollowSymlinksAToolPlanted) {
  TelegramHarness h;
  const fs::path session = h.dir() / "data/channel-workspaces/telegram" /
                           ("telegram%3A" + std::to_string(kChat) + "%3A0");
  fs::create_directories(session / "attachments");
  const fs::path victim = h.dir() / "victim.txt";
  std::ofstream(victim) << "precious\n";
  fs::create_symlink(victim, session / "attachments" / "1-notes.txt");
  ASSERT_TRUE(h.start(kAllowed, "{length: 10, chunk: 100}"));
  h.bot().send_document(kChat, kUser, "notes.txt", "file body\n", "read this");
  ASSERT_TRUE(h.bot().wait_until(
      [&] { return joined_texts(h.bot().messages(kChat)).find("echo(0)") != std::string::npos; },
      std::chrono::seconds(30)));
  std::stringstream kept;
  kept << std::ifstream(victim).rdbuf();
  EXPECT_EQ(kept.str(), "precious\n");
  const fs::path landed = session / "attachments" / "1-notes.txt";
  EXPECT_FALSE(fs::is_symlink(landed));
  std::stringstream body;
  body << std::ifstream(landed).rdbuf();
  EXPECT_EQ(body.str(), "file body\n");
}

TEST(TelegramChannel, SentFilesRefuseAnAttachmentsFolderThatIsASymlink) {
  TelegramHarness h;
  const fs::path session = h.dir() / "data/channel-workspaces/telegram" /
                           ("telegram%3A" + std::to_string(kChat) + "%3A0");
  fs::create_directories(session);
  const fs::path elsewhere = h.dir() / "elsewhere";
  fs::create_directories(elsewhere);
  fs::create_directory_symlink(elsewhere, session / "attachments");
  ASSERT_TRUE(h.start(kAllowed, "{length: 10, chunk: 100}"));
  h.bot().send_document(kChat, kUser, "notes.txt", "file body\n", "read this");
  std::string answer;
  ASSERT_TRUE(h.bot().wait_until(
      [&] {
        answer = joined_texts(h.bot().messages(kChat));
        return answer.find("echo(0)") != std::string::npos;
      },
      std::chrono::seconds(30)));
  EXPECT_TRUE(fs::is_empty(elsewhere));
  EXPECT_NE(answer.find("could not be"), std::string::npos) << answer;
}

TEST(TelegramChannel, RefusesToStartWithoutItsToken) {
  TelegramHarness h;
  ::unsetenv(kernex::test::kTokenEnv);
  ASSERT_TRUE(h.start(kAllowed, "{}"));
  auto result = h.stop();
  ASSERT_FALSE(result);
  EXPECT_NE(result.error().message.find("KERNEX_TEST_TELEGRAM_TOKEN"), std::string::npos);
}

TEST(TelegramChannel, UnknownOptionsAreConfigErrors) {
  TelegramHarness h;
  ASSERT_TRUE(h.start("allowed_users: [7], colour: blue", "{}"));
  auto result = h.stop();
  ASSERT_FALSE(result);
  EXPECT_NE(result.error().describe().find("unknown option `colour`"), std::string::npos)
      << result.error().describe();
}

// The Telegram target, short: 20 chats streaming at once (KERNEX_TELEGRAM_LOAD_SECONDS, default
// 5; bench/telegram_chats runs it for 60 s beside an unpaced baseline): no edit past a chat's
// limit, every answer in full.
TEST(TelegramChannelLoad, TwentyChatsStreamWithinTheLimits) {
  const char* seconds = std::getenv("KERNEX_TELEGRAM_LOAD_SECONDS");
  TelegramHarness h;
  ASSERT_TRUE(h.start("allowed_users: [7]", "{length: 1500, chunk: 20, delay_ms: 40}"));
  const auto f = kernex::test::run_chat_load(
      h, 20, std::chrono::seconds(seconds ? std::atoi(seconds) : 5), 1500);
  std::cout << "[load] chats=20 seconds=" << f.seconds << " answers=" << f.answers_asked
            << " complete=" << f.answers_complete << " missing=" << f.answers_missing
            << " sends=" << f.bot.sends << " edits=" << f.bot.edits
            << " rate_limited=" << f.bot.rate_limited << " early_retries=" << f.bot.early_retries
            << " too_long=" << f.bot.too_long << "\n";
  EXPECT_GE(f.answers_asked, 20u);
  EXPECT_EQ(f.answers_complete, f.answers_asked);
  EXPECT_EQ(f.bot.rate_limited, 0u);
  expect_within_limits(h.bot());
}

// A message memory could not save (over its max_message_bytes) is refused before the provider is
// asked: nothing streams, the person is told why, and nothing of it reaches the conversation.
TEST(TelegramChannel, AMessageMemoryCannotKeepIsRefusedBeforeTheProvider) {
  TelegramHarness h;
  ASSERT_TRUE(h.start(kAllowed, "{length: 40, chunk: 40, delay_ms: 0}",
                      "toolboxes: []\nmemory: {name: sqlite, options: {max_message_bytes: 64}}\n"));
  h.bot().send_text(kChat, kUser, std::string(100, 'x'));
  ASSERT_TRUE(h.bot().wait_until(
      [&] {
        return joined_texts(h.bot().messages(kChat)).find("max_message_bytes") != std::string::npos;
      },
      std::chrono::seconds(30)))
      << joined_texts(h.bot().messages(kChat));
  const std::string said = joined_texts(h.bot().messages(kChat));
  EXPECT_NE(said.find("refused before any provider request"), std::string::npos) << said;
  EXPECT_EQ(said.find("echo("), std::string::npos) << "the provider answered: " << said;
  const auto after = h.last_id(kChat);
  h.bot().send_text(kChat, kUser, "hello");
  EXPECT_TRUE(h.wait_for_text(kChat, drip_answer(0, "hello", 40), after))
      << joined_texts(h.bot().messages(kChat), after);
  EXPECT_TRUE(h.stop());
}

}  // namespace
