// The field tables of kernex.yaml (config_fields.hpp): what ConfigReader accepts, with ranges,
// defaults and docs. One place to change a key; `describe` renders them for the docs.
#pragma once

#include <array>
#include <limits>
#include <string_view>

#include "kernex/config.hpp"
#include "kernex/config_fields.hpp"

namespace kernex::detail::schema {

using config::Field;
using config::FieldType;
using enum config::FieldType;

inline constexpr std::uint64_t kU32 = std::numeric_limits<std::uint32_t>::max();
inline constexpr std::uint64_t kU64 = std::numeric_limits<std::uint64_t>::max();

inline constexpr std::array<std::string_view, 2> kCompactions{"drop", "summarize"};
inline constexpr std::array<std::string_view, 2> kWorkspaceModes{"overlay", "plain"};

inline constexpr std::array kTopFields{
    Field{"data_dir", Path, "where memory, trajectories and state live", "$XDG_DATA_HOME/kernex"},
    Field{"plugin_dirs", List, "directories searched for plugins before the default ones", "[]"},
    Field{"skill_dirs", List, "directories holding skills", "[]"},
    Field{"system_prompt", String, "the system prompt of every run", "\"\""},
    Field{"channel", String, "the channel conversations are keyed by", "cli"},
    Field{"project", String, "the project conversations are keyed by", "\"\""},
    Field{"provider", Table, "the default provider: a name or {name, options}", "unset"},
    Field{"providers", Options, "options per provider name", "{}"},
    Field{"memory", Table, "the memory store: a name or {name, options}; `none`: no memory",
          "sqlite"},
    Field{"hooks", List, "hook plugins, run in this order", "[]"},
    Field{"toolboxes", List, "toolbox plugins to load", "every toolbox found"},
    Field{"permissions", Table, "the rules file and inline allow/ask/deny rules"},
    Field{"pricing_file", Path, "the model price table", "the installed data/pricing.yaml"},
    Field{"limits", Table, "the budgets of a run"},
    Field{"trajectories", Bool, "write a JSON Lines trajectory per run", "true"},
    Field{"workspace", Table, "how tools write into the workspace"},
    Field{"serve", Options, "`kernex serve` settings (checked by the server)"},
    Field{"channels", List, "channel plugins a host runs, each named once", "[]"},
    Field{"topology", Options, "topology settings (checked by `kernex topology`)"},
};

inline constexpr std::array kLimitsFields{
    Field{"max_turns", Integer, "model calls per run", "50", 0, kU32},
    Field{"token_budget", Integer, "billed tokens over a run and its sub-calls", "unset", 0, kU64},
    Field{.name = "cost_budget_usd",
          .type = Number,
          .doc = "cost in USD over a run and its sub-calls",
          .number_min = 0,
          .number_max = kMaxCostBudgetUsd},
    Field{"tool_call_budget", Integer, "tool calls over a run and its sub-calls", "unset", 0, kU32},
    Field{"max_context_messages", Integer, "messages of history sent to the model", "50", 0, kU64},
    Field{.name = "compaction",
          .type = Enum,
          .doc = "what happens to history past max_context_messages",
          .default_text = "drop",
          .choices = kCompactions},
    Field{"conversation_idle_minutes", Integer, "idle time after which a conversation starts over",
          "120", 0, kMaxIdleMinutes},
    Field{"max_depth", Integer, "how deep rlm_query may recurse below the root run", "1", 0, kU32},
};

inline constexpr std::array kPermissionsFields{
    Field{"file", Path, "a rules file", "unset"},
    Field{"allow", List, "rules allowing calls (after the file's)", "[]"},
    Field{"ask", List, "rules for calls that need a person's approval", "[]"},
    Field{"deny", List, "rules refusing calls", "[]"},
};

inline constexpr std::array kWorkspaceFields{
    Field{.name = "mode",
          .type = Enum,
          .doc = "plain: tools write into the workspace; overlay: into a layer a person reviews",
          .default_text = "plain",
          .choices = kWorkspaceModes},
};

inline constexpr std::array kPluginRefFields{
    Field{"name", String, "the plugin's name"},
    Field{"options", Options, "handed to the plugin unchanged", "{}"},
};

inline constexpr config::Section kTop{"", kTopFields};
inline constexpr config::Section kLimits{"limits", kLimitsFields};
inline constexpr config::Section kPermissions{"permissions", kPermissionsFields};
inline constexpr config::Section kWorkspace{"workspace", kWorkspaceFields};
inline constexpr config::Section kPluginRef{"<plugin>", kPluginRefFields};

}  // namespace kernex::detail::schema
