#include "terminal_channel.hpp"

#include <unistd.h>

#include <fstream>
#include <iostream>
#include <optional>

#include "kernex/files.hpp"
#include "suggest.hpp"
#include "terminal_approver.hpp"
#include "terminal_input.hpp"
#include "terminal_text.hpp"

namespace kernex::cli {
namespace {

constexpr const char* kHelp =
    "Type a message and press Enter. /new starts a fresh session, /history shows this one, "
    "/quit (or Ctrl-D) leaves; Ctrl-C stops a running answer. Start a message with // to send "
    "one that begins with /.\n";

// A line that looks like a command (`/word`, no second slash in the word, so `/etc/hosts ...` is
// a message) but names none is answered here, never sent to the model: `/hist` is a typo.
std::optional<std::string> unknown_command(const std::string& line) {
  if (!line.starts_with("/") || line.starts_with("//")) return std::nullopt;
  const std::string word = line.substr(0, line.find(' '));
  if (word.size() < 2 || word.find('/', 1) != std::string::npos) return std::nullopt;
  static const std::string kCommands[] = {"/new", "/history", "/help", "/quit", "/exit"};
  std::string answer = "unknown command " + word;
  if (auto guess = nearest(word, kCommands)) answer += "; did you mean " + *guess + "?";
  return answer + " (/help lists them; the message was not sent)\n";
}

// The session the last chat used, so `kernex chat` goes on where it stopped.
std::string load_session(const std::filesystem::path& file) {
  auto text = read_regular_file(file, "chat session file", 256);
  if (!text) return "chat-1";
  std::string s = *text;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  const bool valid = !s.empty() && s.rfind("chat-", 0) == 0 &&
                     s.find_first_not_of("0123456789", 5) == std::string::npos && s.size() > 5 &&
                     s.size() < 20;
  return valid ? s : "chat-1";
}

void save_session(const std::filesystem::path& file, const std::string& session) {
  const auto tmp = file.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << session << '\n';
  }
  std::error_code ec;
  std::filesystem::rename(tmp, file, ec);
}

// On a terminal, "thinking…" until the first event of the answer, then erased.
struct Thinking {
  bool shown = false;
  void show() {
    if (!isatty(STDOUT_FILENO)) return;
    std::cout << "\033[2mthinking\u2026\033[0m" << std::flush;
    shown = true;
  }
  void clear() {
    if (!shown) return;
    std::cout << "\r\033[K" << std::flush;
    shown = false;
  }
};

StreamSink print_answer(bool& printed, char& last, Thinking& thinking) {
  return [&printed, &last, &thinking](const StreamEvent& event) {
    thinking.clear();
    if (event.kind == StreamEvent::Kind::TextDelta && !event.text.empty()) {
      std::cout << for_terminal(event.text) << std::flush;
      printed = true;
      last = event.text.back();
    } else if (event.kind == StreamEvent::Kind::ToolRun) {
      if (printed && last != '\n') std::cout << '\n';
      std::cerr << "[tool " << for_terminal(event.tool_name) << "]\n";
      last = '\n';
    }
  };
}

}  // namespace

Result<void> TerminalChannel::run(ChannelHost& host, std::stop_token stop) {
  const auto session_file = host.state_dir() / "session";
  session_ = load_session(session_file);
  std::cout << "kernex chat (session " << session_ << "). " << kHelp;
  while (!stop.stop_requested()) {
    std::cout << "you> " << std::flush;
    auto line = read_line(STDIN_FILENO, stop);
    if (!line) break;
    if (line->empty()) continue;
    if (*line == "/quit" || *line == "/exit") break;
    if (*line == "/help") {
      std::cout << kHelp;
    } else if (*line == "/new") {
      new_session(host);
      save_session(session_file, session_);
    } else if (*line == "/history") {
      show_history(host);
    } else if (auto unknown = unknown_command(*line)) {
      std::cout << *unknown;
    } else if (auto done = turn(host, line->starts_with("//") ? line->substr(1) : *line); !done) {
      std::cerr << "kernex: error: " << for_terminal(done.error().describe()) << '\n';
    }
  }
  std::cout << '\n';
  save_session(session_file, session_);
  return {};
}

bool TerminalChannel::interrupt_turn() {
  std::lock_guard lock(mu_);
  if (!turn_running_) return false;
  turn_stop_.request_stop();
  return true;
}

Result<void> TerminalChannel::turn(ChannelHost& host, const std::string& text) {
  {
    std::lock_guard lock(mu_);
    turn_stop_ = std::stop_source();
    turn_running_ = true;
  }
  bool printed = false;
  char last = '\n';
  ChannelTurn t;
  t.session = session_;
  t.sender = "terminal";
  t.text = text;
  Thinking thinking;
  t.sink = print_answer(printed, last, thinking);
  t.approver = [this, &thinking](const ApprovalRequest& r, std::stop_token s) {
    thinking.clear();
    return approve(r, s);
  };
  t.stop = turn_stop_.get_token();
  thinking.show();
  auto reply = host.run(t);
  thinking.clear();
  {
    std::lock_guard lock(mu_);
    turn_running_ = false;
  }
  if (!reply) return std::unexpected(reply.error());
  if (!printed) std::cout << for_terminal(reply->text);
  if (!reply->text.empty() || printed) std::cout << (last == '\n' && printed ? "" : "\n");
  if (reply->outcome == "cancelled")
    std::cout << "(stopped)\n";
  else if (reply->outcome != "end_turn")
    std::cout << "(ended: " << reply->outcome << ")\n";
  std::cout << std::flush;
  return {};
}

ApprovalDecision TerminalChannel::approve(const ApprovalRequest& request, std::stop_token stop) {
  if (always_.contains(request.call.name)) return ApprovalDecision::approve();
  ApprovalDecision decision = ask_on_terminal(request, stop);
  if (decision.verdict == ApprovalVerdict::Always) always_.insert(request.call.name);
  return decision;
}

void TerminalChannel::new_session(ChannelHost&) {
  const auto n = std::stoull(session_.substr(5));
  session_ = "chat-" + std::to_string(n + 1);
  always_.clear();
  std::cout << "(new session " << session_ << ")\n";
}

void TerminalChannel::show_history(ChannelHost& host) {
  auto entries = host.history(session_, 50);
  if (!entries) {
    std::cerr << "kernex: error: " << for_terminal(entries.error().describe()) << '\n';
    return;
  }
  if (entries->empty()) std::cout << "(no messages in " << session_ << " yet)\n";
  for (const auto& e : *entries) {
    if (e.role != "user" && e.role != "assistant") continue;
    std::cout << (e.role == "user" ? "you: " : "kernex: ") << for_terminal(e.content) << '\n';
  }
}

}  // namespace kernex::cli
