// `kernex serve`: the kernel behind HTTP for chat bots and assistants. Sessions and runs with
// SSE, cancel and double-texting policies, an OpenAI-compatible API, tenants with API keys and
// limits, health and metrics. See serve_config.hpp for the `serve:` section.
#pragma once

#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/kernel.hpp"
#include "kernex/skills/skill.hpp"

namespace kernex::server {

struct ServeOptions {
  std::optional<std::string> listen;  // "HOST:PORT"; overrides serve.listen
  // Gets one line once listening: "kernex serve: listening on http://HOST:PORT".
  std::ostream* announce = nullptr;
  // Skill folders that did not load (folder name -> why): a request naming one gets the reason.
  std::map<std::string, std::string> refused_skills;
};

// Serves `kernel` (plugins, memory, hooks, rules, sandbox as `kernex run` has them) and the
// loaded `skills` until SIGTERM or SIGINT, then drains: no new runs, running runs get
// serve.shutdown_grace_ms to finish, then are cancelled; queued runs stay for the next start.
Result<void> serve(Kernel& kernel, std::vector<skills::Skill> skills, const ServeOptions& options);

}  // namespace kernex::server
