// The Telegram channel: long polls getUpdates (the next offset stored before an update is
// handled, so none is handled twice after a restart), turns each allowed person's message into a
// turn of their chat's session, streams the answer, and asks approvals with buttons.
#include <atomic>
#include <charconv>
#include <fstream>

#include "approvals.hpp"
#include "attachment_file.hpp"
#include "kernex/log.hpp"
#include "kernex/plugin.hpp"
#include "session_workers.hpp"
#include "telegram_options.hpp"
#include "telegram_state.hpp"
#include "update_fields.hpp"

namespace kernex::telegram {
namespace {

namespace fs = std::filesystem;

// A file the person sent: the Bot API's id and the name it gets in the workspace.
struct IncomingFile {
  std::string file_id;
  std::string name;
};

// Only [A-Za-z0-9._-] of a sent file's name, never leading dots; "file" when nothing is left.
std::string safe_file_name(const std::string& name) {
  std::string out;
  for (unsigned char c : fs::path(name).filename().string())
    out += std::isalnum(c) || c == '.' || c == '_' || c == '-' ? static_cast<char>(c) : '_';
  while (!out.empty() && out.front() == '.') out.erase(0, 1);
  if (out.size() > 100) out = out.substr(out.size() - 100);
  return out.empty() ? "file" : out;
}

std::vector<IncomingFile> incoming_files(const Json* message, std::int64_t message_id) {
  std::vector<IncomingFile> files;
  if (const Json* doc = object_at(message, "document")) {
    if (auto id = string_at(doc, "file_id"))
      files.push_back({*id, std::to_string(message_id) + "-" +
                                safe_file_name(string_at(doc, "file_name").value_or("file"))});
  }
  auto photo = message->find("photo");
  if (photo != message->end() && photo->is_array() && !photo->empty()) {
    if (auto id = string_at(&photo->back(), "file_id"))  // the largest size comes last
      files.push_back({*id, "photo-" + std::to_string(message_id) + ".jpg"});
  }
  return files;
}

// "/new@my_bot tail" -> "/new"
std::string command_of(const std::string& text) {
  if (!text.starts_with('/')) return {};
  std::string word = text.substr(0, text.find_first_of(" \n"));
  return word.substr(0, word.find('@'));
}

std::string trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t\r\n") + 1 - first);
}

class Bot {
 public:
  Bot(Options options, ChannelHost& host, TelegramState state, std::string token,
      std::stop_token stop)
      : options_(std::move(options)),
        host_(host),
        state_(std::move(state)),
        token_(std::move(token)),
        stop_(stop),
        pacer_(options_.edit_interval),
        approvals_(options_.approval_timeout, state_),
        workers_(stop),
        poll_api_(make_api()),
        gate_api_(make_api()) {}

  Result<void> serve();

 private:
  std::shared_ptr<BotApi> make_api() const {
    return std::make_shared<BotApi>(options_.base_url, token_,
                                    options_.poll_timeout + std::chrono::seconds(30));
  }
  bool allowed(std::int64_t user) const {
    return options_.allowed_users.contains(user) || state_.paired(user);
  }
  void handle(const Json& update);
  void handle_message(const Json& message);
  void handle_callback(const Json& query);
  // A message from someone not allowed: the pairing code (within the attempt limit) or a refusal.
  void stranger(std::int64_t chat, std::int64_t user, bool is_code);
  // A short message to `chat` outside any session (refusals, restart notices).
  void notice(std::int64_t chat, std::string text);
  // Queues a job on the session's worker, with that worker's own client.
  void post(const std::string& scope, std::function<void(BotApi&, std::stop_token)> job);
  void reply(const std::string& scope, std::int64_t chat, std::string text);
  void run_turn(BotApi& api, std::int64_t chat, const std::string& user, const std::string& session,
                std::string text, const std::vector<IncomingFile>& files, std::stop_token stop);
  std::string fetch_files(BotApi& api, const std::string& session,
                          const std::vector<IncomingFile>& files, std::vector<fs::path>& placed,
                          std::stop_token stop);

  Options options_;
  ChannelHost& host_;
  TelegramState state_;
  std::string token_;
  std::stop_token stop_;
  ChatPacer pacer_;
  Approvals approvals_;
  SessionWorkers workers_;
  std::shared_ptr<BotApi> poll_api_;
  std::shared_ptr<BotApi> gate_api_;                     // the strangers' worker's
  std::map<std::string, std::shared_ptr<BotApi>> apis_;  // by session scope; poll thread only
};

Result<void> Bot::serve() {
  // Approvals an earlier process asked and never saw decided: their turns stopped with it.
  const auto interrupted = state_.interrupted();
  for (const auto& a : interrupted) {
    notice(a.chat, "The bot restarted while your approval of " + a.tool +
                       " was pending: that turn stopped. Send your message again.");
  }
  if (!interrupted.empty()) KERNEX_RETURN_IF_ERROR(state_.clear_interrupted());
  auto backoff = std::chrono::milliseconds(500);
  while (!stop_.stop_requested()) {
    const std::int64_t offset = state_.offset();
    Json params{{"offset", offset},
                {"timeout", options_.poll_timeout.count()},
                {"allowed_updates", Json::array({"message", "callback_query"})}};
    auto updates = poll_api_->call("getUpdates", params, stop_);
    if (!updates || !updates->is_array()) {
      if (stop_.stop_requested()) break;
      const std::string why = updates ? "getUpdates: expected a list" : updates.error().describe();
      if (why.find("HTTP 401") != std::string::npos || why.find("HTTP 404") != std::string::npos)
        return fail(ErrorCode::Config, "telegram: the bot token was refused: " + why);
      log(LogLevel::Warn, "telegram: " + why + "; polling again");
      if (!wait_for(backoff, stop_)) break;
      backoff = std::min(backoff * 2, std::chrono::milliseconds(30'000));
      continue;
    }
    backoff = std::chrono::milliseconds(500);
    std::int64_t next = offset;
    for (const Json& update : *updates) {
      if (auto id = int_at(&update, "update_id"); id && *id >= next) next = *id + 1;
    }
    // Stored first: a crash while handling these loses them rather than handling them twice.
    KERNEX_RETURN_IF_ERROR(state_.set_offset(next));
    for (const Json& update : *updates) {
      if (auto id = int_at(&update, "update_id"); id && *id >= offset) handle(update);
    }
  }
  workers_.stop_all();
  return {};
}

void Bot::handle(const Json& update) {
  if (const Json* message = object_at(&update, "message")) return handle_message(*message);
  if (const Json* query = object_at(&update, "callback_query")) return handle_callback(*query);
}

void Bot::post(const std::string& scope, std::function<void(BotApi&, std::stop_token)> job) {
  auto& api = apis_[scope];
  if (!api) api = make_api();
  workers_.post(scope, [api, job = std::move(job)](std::stop_token stop) { job(*api, stop); });
}

void Bot::reply(const std::string& scope, std::int64_t chat, std::string text) {
  post(scope, [this, chat, text = std::move(text)](BotApi& api, std::stop_token stop) {
    Json params{{"chat_id", chat}, {"text", text}};
    auto sent = pacer_.paced(
        chat, [&] { return api.call("sendMessage", params, stop); }, stop);
    if (!sent) log(LogLevel::Warn, "telegram: replying: " + sent.error().describe());
  });
}

void Bot::handle_message(const Json& message) {
  const Json* chat = object_at(&message, "chat");
  auto chat_id = int_at(chat, "id");
  auto user = int_at(object_at(&message, "from"), "id");
  auto message_id = int_at(&message, "message_id");
  if (!chat_id || !user || !message_id) return;  // channel posts, service messages: not ours
  const std::string type = string_at(chat, "type").value_or("private");
  const bool group = type == "group" || type == "supergroup";
  const std::string scope =
      std::to_string(*chat_id) +
      (group && options_.scope == SessionScope::User ? ":" + std::to_string(*user) : std::string());
  std::string text =
      string_at(&message, "text").value_or(string_at(&message, "caption").value_or(""));
  const bool is_code = !options_.pairing_code.empty() && trimmed(text) == options_.pairing_code;
  if (!allowed(*user)) return stranger(*chat_id, *user, is_code);
  if (is_code) return reply(scope, *chat_id, "You are already paired.");
  const std::string command = command_of(text);
  if (command == "/new") {
    if (auto r = state_.next_generation(scope); !r)
      log(LogLevel::Error, "telegram: /new: " + r.error().describe());
    return reply(scope, *chat_id, "Started a new session.");
  }
  if (command == "/start") return reply(scope, *chat_id, "Hello! Send me a message.");
  auto files = incoming_files(&message, *message_id);
  if (trimmed(text).empty() && files.empty()) return;  // stickers and the like
  const std::string session = "telegram:" + scope + ":" + std::to_string(state_.generation(scope));
  post(scope, [this, chat = *chat_id, sender = std::to_string(*user), session,
               text = std::move(text), files](BotApi& api, std::stop_token stop) {
    run_turn(api, chat, sender, session, text, files, stop);
  });
}

void Bot::stranger(std::int64_t chat, std::int64_t user, bool is_code) {
  const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  const std::int64_t window = options_.pairing_window.count();
  if (is_code && !state_.pairing_locked(chat, now, options_.pairing_attempts, window)) {
    if (auto r = state_.pair(user, chat); !r) {
      log(LogLevel::Error, "telegram: pairing: " + r.error().describe());
      return;
    }
    return notice(chat, "Paired: you can talk to me now.");
  }
  auto gate = state_.pairing_failed(chat, now, options_.pairing_attempts, window);
  if (!gate) {
    log(LogLevel::Error, "telegram: pairing attempts: " + gate.error().describe());
    return;
  }
  switch (*gate) {
    case TelegramState::Gate::Refuse:
      return notice(chat, "You may not use this bot. Send its pairing code to start.");
    case TelegramState::Gate::LockedNow:
      return notice(chat, "Too many attempts from this chat: try again in " +
                              std::to_string((window + 59) / 60) + " minutes.");
    case TelegramState::Gate::Silent:
      return;
  }
}

void Bot::notice(std::int64_t chat, std::string text) {
  // One worker for every stranger (and these notices): a chat that may not talk gets no thread of
  // its own.
  workers_.post("~strangers", [this, chat, text = std::move(text)](std::stop_token stop) {
    Json params{{"chat_id", chat}, {"text", text}};
    auto sent = pacer_.paced(
        chat, [&] { return gate_api_->call("sendMessage", params, stop); }, stop);
    if (!sent) log(LogLevel::Warn, "telegram: replying: " + sent.error().describe());
  });
}

void Bot::handle_callback(const Json& query) {
  auto id = string_at(&query, "id");
  auto user = int_at(object_at(&query, "from"), "id");
  auto chat = int_at(object_at(object_at(&query, "message"), "chat"), "id");
  if (!id) return;
  std::string answer = "Unknown button.";
  if (!user || !allowed(*user))
    answer = "You may not use this bot.";
  else if (chat)
    answer = approvals_.resolve(string_at(&query, "data").value_or(""), *chat, *user);
  Json params{{"callback_query_id", *id}, {"text", answer}};
  if (auto r = poll_api_->call("answerCallbackQuery", params, stop_); !r)
    log(LogLevel::Warn, "telegram: answerCallbackQuery: " + r.error().describe());
}

std::string Bot::fetch_files(BotApi& api, const std::string& session,
                             const std::vector<IncomingFile>& files, std::vector<fs::path>& placed,
                             std::stop_token stop) {
  if (files.empty()) return {};
  auto dir = host_.attachments_dir(session);
  if (!dir) return "\n[A file was sent but could not be stored: " + dir.error().message + "]";
  std::string notes;
  for (const auto& file : files) {
    auto info = api.call("getFile", Json{{"file_id", file.file_id}}, stop);
    auto path = info ? string_at(&*info, "file_path") : std::nullopt;
    auto body = path ? api.download(*path, stop)
                     : Result<std::string>(fail(ErrorCode::Provider, "getFile: no file_path"));
    if (!body || (!info)) {
      notes += "\n[The file " + file.name +
               " could not be fetched: " + (info ? body.error().message : info.error().message) +
               "]";
      continue;
    }
    if (auto written = write_attachment(*dir, file.name, *body); !written) {
      log(LogLevel::Warn, "telegram: " + written.error().describe());
      notes += "\n[The file " + file.name + " could not be written]";
      continue;
    }
    placed.push_back(*dir / file.name);
    notes += "\n[The user sent a file, saved as attachments/" + file.name + " (" +
             std::to_string(body->size()) + " bytes)]";
  }
  return notes;
}

void Bot::run_turn(BotApi& api, std::int64_t chat, const std::string& user,
                   const std::string& session, std::string text,
                   const std::vector<IncomingFile>& files, std::stop_token stop) {
  ChannelTurn turn;
  turn.session = session;
  turn.sender = user;
  turn.text = std::move(text) + fetch_files(api, session, files, turn.attachments, stop);
  turn.stop = stop;
  AnswerStream stream(api, pacer_, chat, stop);
  std::mutex stream_mutex;
  turn.sink = [&](const StreamEvent& e) {
    std::lock_guard lock(stream_mutex);
    if (e.kind == StreamEvent::Kind::TextDelta) {
      stream.append(e.text);
    } else if (e.kind == StreamEvent::Kind::ToolRun && !trimmed(stream.text()).empty()) {
      if (auto r = stream.finish(stream.text(), ""); !r)  // text before a tool call stays
        log(LogLevel::Warn, "telegram: " + r.error().describe());
    }
  };
  std::int64_t requester = 0;
  std::from_chars(user.data(), user.data() + user.size(), requester);
  turn.approver = [&, requester](const ApprovalRequest& request, std::stop_token run_stop) {
    return approvals_.ask(api, pacer_, chat, requester, request, run_stop);
  };
  auto reply = host_.run(turn);
  std::lock_guard lock(stream_mutex);
  std::string final_text;
  if (!reply)
    final_text = stream.text() + "\n\n(The turn failed: " + reply.error().message + ")";
  else if (reply->outcome != "end_turn")
    final_text = reply->text + "\n\n(" + reply->outcome + ")";
  else
    final_text = reply->text;
  if (auto r = stream.finish(final_text, "(no answer)"); !r)
    log(LogLevel::Warn, "telegram: delivering an answer: " + r.error().describe());
}

class TelegramChannel final : public Channel {
 public:
  explicit TelegramChannel(Options options) : options_(std::move(options)) {}

  Result<void> run(ChannelHost& host, std::stop_token stop) override {
    auto token = host.env(options_.token_env);
    if (!token || token->empty())
      return fail(ErrorCode::Config, "telegram: the bot token's environment variable " +
                                         options_.token_env + " (option token_env) is not set");
    if (options_.allowed_users.empty() && options_.pairing_code.empty())
      log(LogLevel::Warn, "telegram: neither allowed_users nor pairing_code: nobody may talk");
    KERNEX_ASSIGN_OR_RETURN(auto state, TelegramState::load(host.state_dir()));
    Bot bot(options_, host, std::move(state), std::move(*token), stop);
    return bot.serve();
  }

 private:
  Options options_;
};

Result<std::shared_ptr<Channel>> make_telegram(const Json& config) {
  KERNEX_ASSIGN_OR_RETURN(auto options, parse_options(config));
  return std::shared_ptr<Channel>(std::make_shared<TelegramChannel>(std::move(options)));
}

}  // namespace
}  // namespace kernex::telegram

KERNEX_PLUGIN(Channel, "telegram", "0.1.0",
              "Telegram Bot API: long polling, streamed answers, approval buttons",
              kernex::telegram::make_telegram)
