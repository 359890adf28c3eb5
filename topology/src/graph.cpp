// The topology as a graph: groups, the artifact order (an input must come from an earlier group:
// a phase needing what it or a later phase makes is a cycle), and the text and JSON views.
#include <map>
#include <set>
#include <sstream>

#include "kernex/topology/topology.hpp"
#include "reader.hpp"

namespace kernex::topology {

std::string_view to_string(WorkspaceView view) {
  switch (view) {
    case WorkspaceView::Shared:
      return "shared";
    case WorkspaceView::Overlay:
      return "overlay";
    case WorkspaceView::ReadOnly:
      return "read-only";
  }
  return "shared";
}

std::string_view to_string(ArtifactType type) {
  switch (type) {
    case ArtifactType::Text:
      return "text";
    case ArtifactType::Json:
      return "json";
    case ArtifactType::File:
      return "file";
  }
  return "text";
}

std::string_view to_string(PhaseType type) {
  switch (type) {
    case PhaseType::Standard:
      return "standard";
    case PhaseType::ParseBrief:
      return "parse-brief";
    case PhaseType::CorrectiveLoop:
      return "corrective-loop";
    case PhaseType::ParseSummary:
      return "parse-summary";
    case PhaseType::Map:
      return "map";
    case PhaseType::Handoff:
      return "handoff";
  }
  return "standard";
}

std::vector<std::vector<std::size_t>> Topology::groups() const {
  std::vector<std::vector<std::size_t>> out;
  for (std::size_t i = 0; i < phases.size(); ++i) {
    const auto& g = phases[i].parallel_group;
    if (g && !out.empty() && phases[out.back().front()].parallel_group == g)
      out.back().push_back(i);
    else
      out.push_back({i});
  }
  return out;
}

const Phase* Topology::phase(std::string_view name) const {
  for (const auto& p : phases) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

namespace detail {
namespace {

std::string phase_at(std::size_t i) { return "phases[" + std::to_string(i) + "]"; }

Result<void> check_inputs(const Topology& t, const Reader& reader, const Node& phases,
                          std::size_t i, const std::map<std::string, std::size_t>& made_by,
                          const std::map<std::string, ArtifactType>& available) {
  const Phase& p = t.phases[i];
  const Node& node = phases.items[i];
  std::vector<std::string> needs = p.inputs;
  if (!p.map_over.empty()) needs.push_back(p.map_over);
  for (const auto& name : needs) {
    if (available.contains(name)) continue;
    auto later = made_by.find(name);
    if (later == made_by.end())
      return reader.err(node, phase_at(i) + ".inputs",
                        "unknown artifact '" + name +
                            "' (no earlier phase outputs it; the run's "
                            "input is 'input')");
    return reader.err(node, phase_at(i) + ".inputs",
                      "cycle: phase '" + p.name + "' needs '" + name + "', which phase '" +
                          t.phases[later->second].name + "' makes in the same group or after it");
  }
  if (!p.map_over.empty() && available.at(p.map_over) != ArtifactType::Json)
    return reader.err(node, phase_at(i) + ".map_over",
                      "'" + p.map_over + "' must be a json artifact (an array of items)");
  return {};
}

}  // namespace

Result<void> check_graph(const Topology& t, const Reader& reader, const Node& phases) {
  std::map<std::string, std::size_t> made_by;
  std::set<std::string> names;
  for (std::size_t i = 0; i < t.phases.size(); ++i) {
    const Phase& p = t.phases[i];
    if (!names.insert(p.name).second)
      return reader.err(phases.items[i], phase_at(i) + ".name", "duplicate phase '" + p.name + "'");
    if (p.output == "input")
      return reader.err(phases.items[i], phase_at(i) + ".output", "'input' is the run's input");
    if (!made_by.emplace(p.output, i).second)
      return reader.err(phases.items[i], phase_at(i) + ".output",
                        "artifact '" + p.output + "' is already made by phase '" +
                            t.phases[made_by[p.output]].name + "'");
  }
  std::map<std::string, ArtifactType> available{{"input", ArtifactType::Text}};
  for (const auto& group : t.groups()) {
    if (group.size() > kMaxGroupSize)
      return reader.err(
          phases.items[group.front()], phase_at(group.front()) + ".parallel_group",
          "a parallel group runs at most " + std::to_string(kMaxGroupSize) + " phases");
    for (auto i : group)
      KERNEX_RETURN_IF_ERROR(check_inputs(t, reader, phases, i, made_by, available));
    for (auto i : group) available.emplace(t.phases[i].output, t.phases[i].output_type);
  }
  return {};
}

}  // namespace detail

Json to_json(const Topology& t) {
  Json phases = Json::array();
  for (const auto& p : t.phases) {
    Json j{{"name", p.name},
           {"agent", p.agent},
           {"type", to_string(p.type)},
           {"model_tier", p.model_tier},
           {"inputs", p.inputs},
           {"output", p.output},
           {"output_type", to_string(p.output_type)}};
    if (p.parallel_group) j["parallel_group"] = *p.parallel_group;
    if (p.max_turns) j["max_turns"] = *p.max_turns;
    if (!p.instructions.empty()) j["prompt"] = p.instructions;
    if (!p.output_schema.is_null()) j["output_schema"] = p.output_schema;
    if (!p.output_path.empty()) j["output_path"] = p.output_path;
    if (p.type == PhaseType::CorrectiveLoop)
      j["loop"] = {{"fix_agent", p.fix_agent}, {"max_rounds", p.max_rounds}};
    if (p.type == PhaseType::Map)
      j["map"] = {{"over", p.map_over}, {"max_items", p.max_items}, {"concurrency", p.concurrency}};
    if (p.type == PhaseType::Handoff)
      j["handoff"] = {{"to", p.handoffs}, {"max_handoffs", p.max_handoffs}};
    j["retries"] = p.retries;
    j["backoff_ms"] = p.backoff_ms;
    j["pre_validation"] = p.pre_validation.size();
    j["post_validation"] = p.post_validation.size();
    phases.push_back(std::move(j));
  }
  Json agents = Json::object();
  for (const auto& [name, a] : t.agents) {
    Json j{{"workspace", to_string(a.workspace)}, {"prompt_bytes", a.prompt.size()}};
    if (a.provider) j["provider"] = *a.provider;
    if (a.model) j["model"] = *a.model;
    if (a.tier) j["tier"] = *a.tier;
    if (a.tools) j["tools"] = *a.tools;
    if (!a.skills.empty()) j["skills"] = a.skills;
    agents[name] = std::move(j);
  }
  return {{"name", t.name},          {"description", t.description}, {"version", t.version},
          {"file", t.file.string()}, {"phases", std::move(phases)},  {"agents", std::move(agents)}};
}

std::string Topology::digest() const {
  Json self = to_json(*this);
  self.erase("file");  // the same topology, wherever its folder is
  std::string text = self.dump();
  for (const auto& phase : phases) {
    text += phase.output_schema.dump() + phase.verdict_schema.dump();
    for (const auto& v : phase.post_validation) text += v.schema.dump();
  }
  for (const auto& [name, agent] : agents) text += name + '\0' + agent.prompt + '\0';
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a: a fingerprint, not a secret
  for (const unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  std::ostringstream out;
  out << std::hex << h;
  return out.str();
}

std::string describe(const Topology& t) {
  std::ostringstream out;
  out << t.name << " (v" << t.version << "): " << t.description << "\n";
  std::size_t n = 0;
  for (const auto& group : t.groups()) {
    ++n;
    const bool parallel = group.size() > 1;
    if (parallel)
      out << n << ". parallel group '" << *t.phases[group.front()].parallel_group << "'\n";
    for (auto i : group) {
      const Phase& p = t.phases[i];
      out << (parallel ? "   | " : std::to_string(n) + ". ") << p.name << " [" << to_string(p.type)
          << "] agent " << p.agent << " (" << p.model_tier << ")";
      if (p.type == PhaseType::CorrectiveLoop)
        out << " <-> fix " << p.fix_agent << " (<= " << p.max_rounds << " rounds)";
      if (p.type == PhaseType::Map) out << " over each item of " << p.map_over;
      if (p.type == PhaseType::Handoff) {
        out << " may hand off to";
        for (const auto& h : p.handoffs) out << " " << h;
      }
      out << "\n" << (parallel ? "   |   " : "     ") << "in: ";
      if (p.inputs.empty()) out << "-";
      for (std::size_t k = 0; k < p.inputs.size(); ++k) out << (k ? ", " : "") << p.inputs[k];
      out << "  out: " << p.output << " (" << to_string(p.output_type) << ")\n";
    }
    if (n < t.groups().size()) out << "   |\n   v\n";
  }
  return out.str();
}

}  // namespace kernex::topology
