// An OpenAiRequest into a run: the model resolved (agent profile, provider, model), the client's
// messages as the conversation (the last user message is the run's message, what came before it
// the history, what came after it the tool exchange to go on from), the system text added to
// the agent's instructions.
#include "api.hpp"

namespace kernex::server {

std::expected<RunRequest, ApiError> Api::openai_run_request(const OpenAiRequest& r,
                                                            const std::string& tenant) {
  RunRequest run;
  run.tenant = tenant;
  run.api_model = r.model;
  if (auto m = resolve_model(r.model, deps_.runs->config(), deps_.runs->kernel(), run); !m)
    return std::unexpected(m.error());
  run.session = r.session;
  const std::size_t last = r.last_user();
  if (last >= r.messages.size())
    return std::unexpected(
        api_error(400, "invalid_request", "the conversation has no user message"));
  run.message = r.messages[last].content;
  run.history = std::vector<ContextEntry>(r.messages.begin(),
                                          r.messages.begin() + static_cast<std::ptrdiff_t>(last));
  if (!r.system.empty())
    run.extra_system_prompt += (run.extra_system_prompt.empty() ? "" : "\n\n") + r.system;
  return run;
}

}  // namespace kernex::server
