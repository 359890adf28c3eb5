// Channels carry conversations between a chat network (Telegram, a terminal) and the kernel. A
// channel plugin receives messages, turns each into a run through its ChannelHost, streams the
// answer back and asks its people for approvals. The host (`kernex serve`, `kernex channel run`)
// decides where runs happen and where the channel may keep state.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "kernex/approval.hpp"
#include "kernex/context.hpp"
#include "kernex/error.hpp"
#include "kernex/json.hpp"
#include "kernex/message.hpp"

namespace kernex {

struct ChannelTurn {
  std::string session;  // the channel's name for the conversation, e.g. "telegram:42:1"
  std::string sender;   // who wrote, as the network names them
  std::string text;
  std::vector<std::filesystem::path> attachments;  // files the host placed (attachments_dir)
  StreamSink sink;                                 // the answer as it streams
  Approver approver;  // how this chat answers approvals; unset: calls needing one are denied
  std::stop_token stop;
};

// What a turn ended with.
struct ChannelReply {
  std::string text;     // the final answer (what streamed, for a cancelled turn)
  std::string outcome;  // "end_turn", "cancelled", "max_turns", "budget_exhausted:..."
  std::string run_id;   // the trajectory's id; empty when none was written
};

class ChannelHost {
 public:
  virtual ~ChannelHost() = default;
  // Runs one turn of `turn.session`; one at a time per session (the host serialises them).
  virtual Result<ChannelReply> run(const ChannelTurn& turn) = 0;
  // The session's exchanges so far, oldest first, at most `limit`.
  virtual Result<std::vector<ContextEntry>> history(const std::string& session,
                                                    std::size_t limit) = 0;
  // A directory only the kernel writes (no tool can): the channel's durable state, e.g. the
  // update offset of a long poll. Created by the host.
  virtual std::filesystem::path state_dir() = 0;
  // Where files a person sent go so this session's tools can read them. Created by the host.
  virtual Result<std::filesystem::path> attachments_dir(const std::string& session) = 0;
  // Secrets come from the environment only (options name the variable, e.g. token_env).
  virtual std::optional<std::string> env(const std::string& name) = 0;
};

class Channel {
 public:
  virtual ~Channel() = default;
  // Serves the network until `stop` is requested (then returns promptly); an error when it
  // cannot go on (bad token, unreachable after retries are used up).
  virtual Result<void> run(ChannelHost& host, std::stop_token stop) = 0;
};

}  // namespace kernex
