// KernelChannelHost: a channel's turns become Kernel runs, one conversation and one workspace per
// session, one turn at a time per session.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <system_error>

#include "kernex/channels/channel_host.hpp"
#include "kernex/kernel_files.hpp"

namespace kernex::channels {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kMaxSessionBytes = 200;

// A session name as one path component: letters, digits, '_' and '-' stay, anything else
// (':' '/' '.' ...) becomes %XX, so two sessions never share a directory and none escapes.
Result<std::string> path_component(const std::string& session) {
  if (session.empty() || session.size() > kMaxSessionBytes)
    return fail(ErrorCode::Usage, "channel session: expected a name of 1 to 200 bytes, got " +
                                      std::to_string(session.size()));
  std::string out;
  for (unsigned char c : session) {
    if (std::isalnum(c) || c == '_' || c == '-') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

Result<void> make_dirs(const fs::path& dir, std::string_view what) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return fail(ErrorCode::Io,
                "cannot create " + std::string(what) + " " + dir.string() + ": " + ec.message());
  return {};
}

}  // namespace

KernelChannelHost::KernelChannelHost(Kernel& kernel, std::string name)
    : kernel_(kernel),
      name_(std::move(name)),
      state_dir_(kernel.config().data_dir / "channels" / name_),
      workspaces_(kernel.config().data_dir / "channel-workspaces" / name_) {
  // The state holds what the channel trusts (offsets, paired users): no tool may write it. The
  // workspaces lie in the hidden data dir too; each session's tools are granted their own.
  register_kernel_file(state_dir_, KernelFileAccess::Hidden, "channel state");
  std::error_code ec;
  fs::create_directories(state_dir_, ec);
  fs::create_directories(workspaces_, ec);
  register_tool_area(workspaces_, "channel workspaces");
}

ConversationKey KernelChannelHost::conversation(const std::string& session) const {
  return ConversationKey{"channel/" + name_, session, kernel_.config().project};
}

std::shared_ptr<std::mutex> KernelChannelHost::session_lock(const std::string& session) {
  std::lock_guard lock(mutex_);
  auto& slot = sessions_[session];
  if (!slot) slot = std::make_shared<std::mutex>();
  return slot;
}

Result<fs::path> KernelChannelHost::workspace(const std::string& session) {
  KERNEX_ASSIGN_OR_RETURN(auto component, path_component(session));
  fs::path dir = workspaces_ / component;
  KERNEX_RETURN_IF_ERROR(make_dirs(dir, "session workspace"));
  return dir;
}

Result<ChannelReply> KernelChannelHost::run(const ChannelTurn& turn) {
  KERNEX_ASSIGN_OR_RETURN(auto dir, workspace(turn.session));
  auto lock = session_lock(turn.session);
  std::lock_guard one_turn(*lock);
  RunOptions options;
  options.conversation = conversation(turn.session);
  options.workspace = dir;
  options.sink = turn.sink;
  options.approver = turn.approver;
  options.stop = turn.stop;
  Request request = Request::from_text(turn.sender, turn.text);
  request.source = name_;
  KERNEX_ASSIGN_OR_RETURN(auto result, kernel_.run(request, options));
  return ChannelReply{result.text, std::string(to_string(result.outcome)), result.run_id};
}

Result<std::vector<ContextEntry>> KernelChannelHost::history(const std::string& session,
                                                             std::size_t limit) {
  auto memory = kernel_.memory();
  if (!memory) return std::vector<ContextEntry>{};
  const ConversationKey key = conversation(session);
  ConversationFilter filter;
  filter.channel = key.channel;
  filter.sender_id = key.sender_id;
  auto found = memory->list_conversations(MemoryScope::local(), filter);
  if (!found && found.error().code == ErrorCode::Unsupported) return std::vector<ContextEntry>{};
  if (!found) return std::unexpected(found.error());
  for (const auto& info : *found) {  // newest first
    if (info.key.project == key.project)
      return memory->recent_messages(MemoryScope::local(), info.id, limit);
  }
  return std::vector<ContextEntry>{};
}

fs::path KernelChannelHost::state_dir() { return state_dir_; }

Result<fs::path> KernelChannelHost::attachments_dir(const std::string& session) {
  KERNEX_ASSIGN_OR_RETURN(auto dir, workspace(session));
  dir /= "attachments";
  KERNEX_RETURN_IF_ERROR(make_dirs(dir, "attachments dir"));
  return dir;
}

std::optional<std::string> KernelChannelHost::env(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

}  // namespace kernex::channels
