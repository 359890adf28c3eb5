#include "approvals.hpp"

#include <random>

#include "kernex/log.hpp"

namespace kernex::telegram {

namespace {

constexpr std::size_t kMaxArgumentsShown = 1500;

std::string question(const ApprovalRequest& request) {
  std::string args = request.call.arguments.dump(2, ' ', false, Json::error_handler_t::replace);
  // Long arguments: their start and their end (where padding would push the dangerous part).
  if (args.size() > kMaxArgumentsShown) {
    const std::size_t total = args.size();
    args = args.substr(0, kMaxArgumentsShown / 2) + "\n… (" + std::to_string(total) +
           " characters in all) …\n" + args.substr(total - kMaxArgumentsShown / 2);
  }
  std::string text = "Approve this tool call?\n" + request.call.name + " " + args;
  if (!request.reason.empty()) text += "\nWhy asked: " + request.reason;
  return text;
}

Json keyboard(const std::string& id) {
  auto button = [&](const char* label, const char* verdict) {
    return Json{{"text", label}, {"callback_data", "ap:" + id + ":" + verdict}};
  };
  return Json{
      {"inline_keyboard", Json::array({Json::array({button("Approve", "y"), button("Deny", "n"),
                                                    button("Always", "a")})})}};
}

}  // namespace

ApprovalDecision Approvals::ask(BotApi& api, ChatPacer& pacer, std::int64_t chat,
                                std::int64_t requester, const ApprovalRequest& request,
                                std::stop_token stop) {
  auto entry = std::make_shared<Pending>();
  entry->chat = chat;
  entry->requester = requester;
  std::string id;
  {
    std::lock_guard lock(mutex_);
    // A random part: a button of an earlier run (before a restart) never resolves this one.
    id = std::to_string(std::random_device{}() % 100000) + "-" + std::to_string(next_id_++);
    pending_[id] = entry;
  }
  if (auto r = state_.approval_asked({id, chat, request.call.name}); !r)
    log(LogLevel::Warn, "telegram: recording an approval: " + r.error().describe());
  Json params{{"chat_id", chat}, {"text", question(request)}, {"reply_markup", keyboard(id)}};
  auto sent = pacer.paced(
      chat, [&] { return api.call("sendMessage", params, stop); }, stop);
  std::unique_lock lock(mutex_);
  ApprovalDecision decision;
  decision.verdict = ApprovalVerdict::Deny;
  if (!sent) {
    log(LogLevel::Warn, "telegram: asking for an approval: " + sent.error().describe());
    decision.reason = "the approval could not be asked in the chat";
  } else if (changed_.wait_for(lock, stop, timeout_, [&] { return entry->verdict.has_value(); })) {
    decision.verdict = *entry->verdict;
    if (decision.verdict == ApprovalVerdict::Deny) decision.reason = "denied in the chat";
  } else {
    decision.reason = stop.stop_requested() ? "the channel stopped" : "the approval timed out";
  }
  pending_.erase(id);
  lock.unlock();
  // Stopped undecided: left recorded, for the next process to tell the chat.
  if (!stop.stop_requested()) {
    if (auto r = state_.approval_settled(id); !r)
      log(LogLevel::Warn, "telegram: settling an approval: " + r.error().describe());
  }
  return decision;
}

std::string Approvals::resolve(const std::string& data, std::int64_t chat, std::int64_t user) {
  if (!data.starts_with("ap:") || data.size() < 6 || data[data.size() - 2] != ':')
    return "Unknown button.";
  const std::string id = data.substr(3, data.size() - 5);
  const char verdict = data.back();
  std::lock_guard lock(mutex_);
  auto it = pending_.find(id);
  if (it == pending_.end() && state_.was_interrupted(id))
    return "This request ended when the bot restarted: send your message again.";
  if (it == pending_.end() || it->second->chat != chat || it->second->verdict)
    return "This approval is no longer pending.";
  if (it->second->requester != user) return "Only the person who asked may decide.";
  switch (verdict) {
    case 'y':
      it->second->verdict = ApprovalVerdict::Approve;
      break;
    case 'a':
      it->second->verdict = ApprovalVerdict::Always;
      break;
    case 'n':
      it->second->verdict = ApprovalVerdict::Deny;
      break;
    default:
      return "Unknown button.";
  }
  changed_.notify_all();
  return verdict == 'n' ? "Denied." : "Approved.";
}

std::size_t Approvals::pending() const {
  std::lock_guard lock(mutex_);
  return pending_.size();
}

}  // namespace kernex::telegram
