#include "user_memory.hpp"

namespace kernex::server {
namespace {

// Tenant names have no '/' ([A-Za-z0-9_.-]), so no tenant's channels meet another's, and the
// session, any string, is the whole rest.
std::string session_channel(const std::string& tenant, const std::string& session) {
  return "serve/" + tenant + "/" + session;
}

}  // namespace

ConversationKey user_conversation(const std::string& tenant, const std::string& session,
                                  const std::string& user, const std::string& project) {
  if (user.empty()) return ConversationKey{"serve/" + tenant, session, project};
  return ConversationKey{session_channel(tenant, session), user, project};
}

Result<void> add_user_conversations(MemoryStore& memory, const MemoryScope& scope,
                                    const std::string& tenant, const std::string& session,
                                    const std::string& project, std::vector<std::string>& ids) {
  ConversationFilter filter;
  filter.channel = session_channel(tenant, session);
  filter.limit = 100000;
  KERNEX_ASSIGN_OR_RETURN(auto conversations, memory.list_conversations(scope, filter));
  for (auto it = conversations.rbegin(); it != conversations.rend(); ++it) {
    if (it->key.project == project && it->key.channel == *filter.channel) ids.push_back(it->id);
  }
  return {};
}

}  // namespace kernex::server
