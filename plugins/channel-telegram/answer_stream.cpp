#include "answer_stream.hpp"

#include "kernex/log.hpp"
#include "message_split.hpp"

namespace kernex::telegram {

namespace {

bool blank(const std::string& text) {
  return text.find_first_not_of(" \t\r\n") == std::string::npos;
}

}  // namespace

std::shared_ptr<ChatPacer::Slot> ChatPacer::slot(std::int64_t chat) {
  std::lock_guard lock(mutex_);
  auto& s = slots_[chat];
  if (!s) s = std::make_shared<Slot>();
  return s;
}

Result<Json> ChatPacer::paced(std::int64_t chat, const Send& send, std::stop_token stop) {
  auto s = slot(chat);
  std::lock_guard one_at_a_time(s->mutex);
  const auto wait = s->next - std::chrono::steady_clock::now();
  if (wait > std::chrono::steady_clock::duration::zero() &&
      !wait_for(std::chrono::duration_cast<std::chrono::milliseconds>(wait) +
                    std::chrono::milliseconds(1),
                stop))
    return fail(ErrorCode::Cancelled, "telegram: stopped");
  auto result = send();
  s->next = std::chrono::steady_clock::now() + interval_;
  return result;
}

std::optional<Result<Json>> ChatPacer::try_paced(std::int64_t chat, const Send& send) {
  auto s = slot(chat);
  std::unique_lock lock(s->mutex, std::try_to_lock);
  if (!lock.owns_lock() || std::chrono::steady_clock::now() < s->next) return std::nullopt;
  auto result = send();
  s->next = std::chrono::steady_clock::now() + interval_;
  return result;
}

Result<void> AnswerStream::put(std::size_t index, const std::string& part, bool wait, bool& sent) {
  sent = false;
  const bool edit = index < sent_.size();
  if (edit && sent_[index].text == part) {
    sent = true;  // nothing to change
    return {};
  }
  Json params{{"chat_id", chat_}, {"text", part}};
  if (edit) params["message_id"] = sent_[index].id;
  const std::string method = edit ? "editMessageText" : "sendMessage";
  ChatPacer::Send send = [&] { return api_.call(method, params, stop_); };
  std::optional<Result<Json>> reply;
  if (wait)
    reply = pacer_.paced(chat_, send, stop_);
  else
    reply = pacer_.try_paced(chat_, send);
  if (!reply) return {};
  if (!*reply) return std::unexpected(reply->error());
  sent = true;
  if (edit) {
    sent_[index].text = part;
    return {};
  }
  const Json& message = **reply;
  auto id = message.is_object() ? message.find("message_id") : message.end();
  if (!message.is_object() || id == message.end() || !id->is_number_integer())
    return fail(ErrorCode::Provider, "telegram sendMessage: the result has no message_id");
  sent_.push_back({id->get<std::int64_t>(), part});
  return {};
}

Result<void> AnswerStream::render(const std::string& text, bool wait) {
  const auto parts = split_message(text);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    // Telegram refuses blank texts: streaming waits for more, a final blank piece shows a dot.
    const bool is_blank = blank(parts[i]);
    if (is_blank && !wait) return {};
    bool sent = false;
    KERNEX_RETURN_IF_ERROR(put(i, is_blank ? std::string(".") : parts[i], wait, sent));
    if (!sent) return {};
  }
  return {};
}

void AnswerStream::append(const std::string& delta) {
  text_ += delta;
  if (auto r = render(text_, false); !r)
    log(LogLevel::Warn, "telegram: streaming an answer: " + r.error().describe());
}

Result<void> AnswerStream::finish(const std::string& text, const std::string& empty_note) {
  auto result = render(blank(text) ? empty_note : text, true);
  text_.clear();
  sent_.clear();
  return result;
}

}  // namespace kernex::telegram
