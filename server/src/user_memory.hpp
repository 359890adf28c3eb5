// OpenAI's `user` in memory (issue 33: it scopes recall and facts within the tenant, and is never a
// session). A run in a named session that carries a `user` keeps its exchange in the conversation
// {channel "serve/<tenant>/<session>", sender_id = user, project}: recall, facts, lessons, outcomes
// and tasks, keyed by the conversation's sender, are then the user's across their sessions, and
// every memory call still carries the tenant's scope, so no other tenant's user of the same name
// is reached. The session finds, lists and forgets its own conversations by that channel. Without
// a `user` the conversation is the session's own ({"serve/<tenant>", sender_id = session}); without
// a session no memory is read or written at all.
#pragma once

#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/memory.hpp"

namespace kernex::server {

// The memory conversation of a run in `session` (not empty) for `user` ("" when none was given).
ConversationKey user_conversation(const std::string& tenant, const std::string& session,
                                  const std::string& user, const std::string& project);

// Appends to `ids` the conversations users' runs kept in the session (oldest first).
Result<void> add_user_conversations(MemoryStore& memory, const MemoryScope& scope,
                                    const std::string& tenant, const std::string& session,
                                    const std::string& project, std::vector<std::string>& ids);

}  // namespace kernex::server
