// The [agents.NAME] tables and the agents' .md files beside the topology.
#include <sys/stat.h>

#include <set>

#include "kernex/config.hpp"
#include "kernex/files.hpp"
#include "kernex/topology/topology.hpp"
#include "reader.hpp"

namespace kernex::topology::detail {
namespace {

Result<WorkspaceView> workspace_view(const Reader& reader, const Node& node,
                                     const std::string& path) {
  KERNEX_ASSIGN_OR_RETURN(auto v, reader.string(node, path));
  if (v == "shared") return WorkspaceView::Shared;
  if (v == "overlay") return WorkspaceView::Overlay;
  if (v == "read-only" || v == "read_only") return WorkspaceView::ReadOnly;
  return reader.err(node, path, "expected shared, overlay or read-only");
}

Result<void> read_permissions(const Reader& reader, const Node& node, const std::string& path,
                              Agent& out) {
  return reader.each_key(node, path, {"allow", "ask", "deny"},
                         [&](const std::string& key, const Node& value, const std::string& sub) {
                           return assign(reader.strings(value, sub), key == "allow" ? out.allow
                                                                     : key == "ask" ? out.ask
                                                                                    : out.deny);
                         });
}

Result<void> read_agent_key(const Reader& reader, const std::string& key, const Node& value,
                            const std::string& sub, Agent& a) {
  if (key == "provider" || key == "model" || key == "tier") {
    KERNEX_ASSIGN_OR_RETURN(auto s, reader.string(value, sub));
    if (s.empty() || s.size() > 256) return reader.err(value, sub, "expected 1-256 characters");
    (key == "provider" ? a.provider : key == "model" ? a.model : a.tier) = std::move(s);
    return {};
  }
  if (key == "tools") return assign(reader.strings(value, sub), a.tools.emplace());
  if (key == "skills" || key == "toolboxes") {
    KERNEX_ASSIGN_OR_RETURN(auto list, reader.strings(value, sub, 64));
    for (const auto& n : list) {
      if (!valid_name(n))
        return reader.err(value, sub, "\"" + n.substr(0, 80) + "\" is not a name");
    }
    (key == "skills" ? a.skills : a.toolboxes) = std::move(list);
    return {};
  }
  if (key == "permissions") return read_permissions(reader, value, sub, a);
  if (key == "sandbox_profile") {
    KERNEX_ASSIGN_OR_RETURN(auto rel, reader.relative_path(value, sub));
    a.sandbox_profile = rel;
    return {};
  }
  if (key == "workspace") return assign(workspace_view(reader, value, sub), a.workspace);
  if (key == "description") {
    KERNEX_ASSIGN_OR_RETURN(auto text, reader.string(value, sub));
    (void)text;  // for readers of the file; the .md is what the agent is told
    return {};
  }
  return read_limits(reader, value, sub, a.limits);
}

}  // namespace

Result<void> read_limits(const Reader& reader, const Node& node, const std::string& path,
                         AgentLimits& out) {
  return reader.each_key(
      node, path,
      {"max_turns", "token_budget", "cost_budget_usd", "tool_call_budget", "wall_time_ms"},
      [&](const std::string& key, const Node& value, const std::string& sub) -> Result<void> {
        if (key == "cost_budget_usd")
          return assign(reader.number(value, sub, 0, kMaxCostBudgetUsd),
                        out.budgets.cost_budget_usd);
        if (key == "token_budget")
          return assign(reader.integer(value, sub, 0, std::int64_t{1} << 53),
                        out.budgets.token_budget);
        KERNEX_ASSIGN_OR_RETURN(auto n, reader.integer(value, sub, 0, 0xFFFFFFFFLL));
        const auto v = static_cast<std::uint32_t>(n);
        if (key == "max_turns") out.budgets.max_turns = v;
        if (key == "tool_call_budget") out.budgets.tool_call_budget = v;
        if (key == "wall_time_ms") out.wall_time_ms = v;
        return {};
      });
}

Result<void> read_agents(const Reader& reader, const Node& node, Topology& out) {
  if (!node.is_map()) return reader.err(node, "agents", "expected a table of agents");
  if (node.entries.size() > kMaxAgents)
    return reader.err(node, "agents", "more than " + std::to_string(kMaxAgents) + " agents");
  for (const auto& entry : node.entries) {
    const std::string path = "agents." + entry.key;
    if (!valid_name(entry.key))
      return reader.err(entry.value, path,
                        "\"" + entry.key.substr(0, 80) + "\" is not a valid agent name");
    if (out.agents.contains(entry.key)) return reader.err(entry.value, path, "duplicate agent");
    Agent agent;
    agent.name = entry.key;
    KERNEX_RETURN_IF_ERROR(
        reader.each_key(entry.value, path,
                        {"provider", "model", "tier", "tools", "skills", "toolboxes", "permissions",
                         "sandbox_profile", "workspace", "limits", "description"},
                        [&](const std::string& key, const Node& value, const std::string& sub) {
                          return read_agent_key(reader, key, value, sub, agent);
                        }));
    if (agent.tier && (agent.provider || agent.model))
      return reader.err(entry.value, path, "give either `tier` or `provider`/`model`, not both");
    out.agents.emplace(entry.key, std::move(agent));
  }
  return {};
}

namespace {

// A symbolic link is refused: the topology folder's files are read, never what they point at.
Result<std::string> read_prompt(const std::filesystem::path& file, const std::string& agent) {
  struct stat st {};
  if (::lstat(file.c_str(), &st) != 0)
    return fail(ErrorCode::Config, "agent '" + agent + "' has no instructions file " +
                                       file.string() + " (every agent needs agents/<name>.md)");
  if (S_ISLNK(st.st_mode))
    return fail(ErrorCode::Config, file.string() +
                                       " is a symbolic link; agents' .md files must "
                                       "be regular files in the topology folder");
  auto text = read_regular_file(file, "agent instructions", kMaxAgentPromptBytes);
  if (!text) return fail(ErrorCode::Config, "agent '" + agent + "'", text.error());
  return std::move(*text);
}

Agent named_agent(const std::string& name) {
  Agent agent;
  agent.name = name;
  return agent;
}

void referenced(const Phase& p, std::vector<std::pair<std::string, std::string>>& out,
                std::size_t index) {
  const std::string at = "phases[" + std::to_string(index) + "]";
  out.emplace_back(p.agent, at + ".agent");
  if (!p.fix_agent.empty()) out.emplace_back(p.fix_agent, at + ".retry.fix_agent");
  for (const auto& h : p.handoffs) out.emplace_back(h, at + ".handoffs");
}

}  // namespace

// Every agent a phase names must have agents/<name>.md; other .md files there load too.
Result<void> load_agents(Topology& topology, const Reader& reader, const Node& phases) {
  std::vector<std::pair<std::string, std::string>> names;
  for (std::size_t i = 0; i < topology.phases.size(); ++i) referenced(topology.phases[i], names, i);
  const auto agents_dir = topology.dir / "agents";
  for (const auto& [name, where] : names) {
    if (!topology.agents.contains(name)) topology.agents.emplace(name, named_agent(name));
  }
  std::error_code ec;
  std::size_t extra = 0;
  for (std::filesystem::directory_iterator it(agents_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const auto& p = it->path();
    if (p.extension() != ".md" || !valid_name(p.stem().string())) continue;
    if (++extra > kMaxAgents) return reader.err(phases, "", "agents/ holds too many .md files");
    if (!topology.agents.contains(p.stem().string()))
      topology.agents.emplace(p.stem().string(), named_agent(p.stem().string()));
  }
  if (topology.agents.size() > kMaxAgents)
    return reader.err(phases, "", "more than " + std::to_string(kMaxAgents) + " agents");
  for (auto& [name, agent] : topology.agents) {
    agent.prompt_file = agents_dir / (name + ".md");
    auto prompt = read_prompt(agent.prompt_file, name);
    if (!prompt) {
      std::string where = "agents." + name;
      for (const auto& [n, w] : names) {
        if (n == name) {
          where = w;
          break;
        }
      }
      return fail(ErrorCode::Config, reader.file() + ": " + where, prompt.error());
    }
    agent.prompt = std::move(*prompt);
    if (agent.sandbox_profile) agent.sandbox_profile = topology.dir / *agent.sandbox_profile;
  }
  return {};
}

}  // namespace kernex::topology::detail
