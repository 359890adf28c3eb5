// The one place every `kernex` entry point that loads skills gets its trust rule from, so none can
// load a skill a tool could have planted without the person's `kernex skills trust`.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kernex/config.hpp"
#include "kernex/skills/context_source.hpp"
#include "kernex/skills/loader.hpp"

namespace kernex::cli {

// Writable locations: the working directory (every toolbox plugin's default workspace), each
// toolbox plugin's `workspace` option and its `profile`'s workspace and read_write dirs, and
// `extra` (e.g. `tool run --workspace`); world-writable directories count by themselves
// (trust.hpp). The store is <data_dir>/trusted-skills.json: the data dir is a Hidden kernel file,
// so no sandbox can read or forge it.
skills::LoadOptions skill_load_options(const Config& config,
                                       const std::vector<std::filesystem::path>& extra = {});

// The skill folders of a run: config.skill_dirs, then the trusted saved skills of the CLI's
// tenant, "local" (save_skill() from REPL code; kernex/skills/saved_skills.hpp), whose area
// joins options.trust's writable locations.
std::vector<std::filesystem::path> run_skill_dirs(const Config& config,
                                                  skills::LoadOptions& options);

// The skills of a run (`kernex run`, `kernex rlm`): config.skill_dirs loaded under the trust rule,
// every refused skill, toolbox and MCP server logged with why, `activate` checked. Asking for a
// skill that did not load is an error that says why it did not. Null when there are none.
Result<std::shared_ptr<skills::SkillContextSource>> load_run_skills(
    const Config& config, const std::vector<std::string>& activate);

// <data_dir>/trusted-skills.json
std::filesystem::path trust_store(const Config& config);

}  // namespace kernex::cli
