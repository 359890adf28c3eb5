// TOPOLOGY.toml / TOPOLOGY.yaml -> Topology. One reader for both formats (the skills' Node tree),
// then the checks that need the whole file: agents' .md files, artifacts in order, bounds.
#include <set>

#include "kernex/files.hpp"
#include "kernex/topology/topology.hpp"
#include "reader.hpp"
#include "schema.hpp"

namespace kernex::topology {
namespace {

using detail::Node;
using detail::Reader;

Result<Json> read_schema(const Reader& reader, const Node& node, const std::string& path,
                         const std::filesystem::path& dir, std::string& file_out) {
  KERNEX_ASSIGN_OR_RETURN(auto rel, reader.relative_path(node, path));
  auto text = read_regular_file(dir / rel, "JSON Schema", kMaxSchemaBytes);
  if (!text) return reader.err(node, path, text.error().message);
  Json schema = parse_untrusted(*text);
  if (schema.is_discarded()) return reader.err(node, path, rel + " is not valid JSON");
  KERNEX_RETURN_IF_ERROR(detail::check_schema(schema, reader.file() + ": " + path + ": " + rel));
  file_out = rel;
  return schema;
}

Result<Validation> read_validation(const Reader& reader, const Node& node, const std::string& path,
                                   const std::filesystem::path& dir) {
  Validation v;
  bool typed = false;
  KERNEX_RETURN_IF_ERROR(reader.each_key(
      node, path, {"type", "paths", "patterns", "schema"},
      [&](const std::string& key, const Node& value, const std::string& sub) -> Result<void> {
        if (key == "type") {
          KERNEX_ASSIGN_OR_RETURN(auto t, reader.string(value, sub));
          typed = true;
          if (t == "file_exists")
            v.kind = Validation::Kind::FileExists;
          else if (t == "file_patterns")
            v.kind = Validation::Kind::FilePatterns;
          else if (t == "file_not_empty")
            v.kind = Validation::Kind::FileNotEmpty;
          else if (t == "json_schema")
            v.kind = Validation::Kind::JsonSchema;
          else
            return reader.err(value, sub,
                              "unknown validation type \"" + t.substr(0, 64) +
                                  "\" (expected file_exists, file_patterns, file_not_empty, "
                                  "json_schema)");
          return {};
        }
        if (key == "schema") {
          KERNEX_ASSIGN_OR_RETURN(v.schema, read_schema(reader, value, sub, dir, v.schema_file));
          return {};
        }
        KERNEX_ASSIGN_OR_RETURN(auto list, reader.strings(value, sub));
        for (std::size_t i = 0; i < list.size(); ++i) {
          if (key == "paths" && !detail::safe_relative_path(list[i]))
            return reader.err(value, sub + "[" + std::to_string(i) + "]",
                              "must be a relative path inside the workspace (no '..')");
          if (list[i].empty()) return reader.err(value, sub, "an empty entry");
        }
        (key == "paths" ? v.paths : v.patterns) = std::move(list);
        return {};
      }));
  if (!typed) return reader.err(node, path, "`type` is required");
  const bool needs_paths =
      v.kind == Validation::Kind::FileExists || v.kind == Validation::Kind::FileNotEmpty;
  if (needs_paths && v.paths.empty()) return reader.err(node, path, "`paths` is required");
  if (v.kind == Validation::Kind::FilePatterns && v.patterns.empty())
    return reader.err(node, path, "`patterns` is required");
  if (v.kind == Validation::Kind::JsonSchema && v.schema.is_null())
    return reader.err(node, path, "`schema` is required");
  return v;
}

// kernex writes post_validation as a list of paths; a table or a list of tables also works.
Result<std::vector<Validation>> read_validations(const Reader& reader, const Node& node,
                                                 const std::string& path,
                                                 const std::filesystem::path& dir) {
  std::vector<Validation> out;
  if (node.is_map()) {
    KERNEX_ASSIGN_OR_RETURN(auto v, read_validation(reader, node, path, dir));
    out.push_back(std::move(v));
    return out;
  }
  if (node.kind != Node::Kind::List || node.items.size() > 64)
    return reader.err(node, path, "expected a list of paths or of validation tables (at most 64)");
  Validation paths;
  for (std::size_t i = 0; i < node.items.size(); ++i) {
    const std::string sub = path + "[" + std::to_string(i) + "]";
    if (node.items[i].is_map()) {
      KERNEX_ASSIGN_OR_RETURN(auto v, read_validation(reader, node.items[i], sub, dir));
      out.push_back(std::move(v));
    } else {
      KERNEX_ASSIGN_OR_RETURN(auto p, reader.relative_path(node.items[i], sub));
      paths.paths.push_back(std::move(p));
    }
  }
  if (!paths.paths.empty()) out.push_back(std::move(paths));
  return out;
}

Result<PhaseType> phase_type(const Reader& reader, const Node& node, const std::string& path) {
  KERNEX_ASSIGN_OR_RETURN(auto t, reader.string(node, path));
  if (t == "standard") return PhaseType::Standard;
  if (t == "parse-brief") return PhaseType::ParseBrief;
  if (t == "corrective-loop") return PhaseType::CorrectiveLoop;
  if (t == "parse-summary") return PhaseType::ParseSummary;
  if (t == "map") return PhaseType::Map;
  if (t == "handoff") return PhaseType::Handoff;
  return reader.err(node, path,
                    "unknown phase_type \"" + t.substr(0, 64) +
                        "\" (expected standard, parse-brief, corrective-loop, parse-summary, map, "
                        "handoff)");
}

Result<void> read_retry(const Reader& reader, const Node& node, const std::string& path, Phase& out,
                        bool& has_max) {
  return reader.each_key(
      node, path, {"max", "fix_agent", "backoff_ms"},
      [&](const std::string& key, const Node& value, const std::string& sub) -> Result<void> {
        if (key == "fix_agent") return detail::assign(reader.name(value, sub), out.fix_agent);
        if (key == "backoff_ms")
          return detail::assign(reader.integer(value, sub, 0, kMaxBackoffMs), out.backoff_ms);
        // A loop's rounds or a phase's retries; bounded either way (an unbounded loop is refused).
        has_max = true;
        return detail::assign(reader.integer(value, sub, 0, 1'000'000), out.max_rounds);
      });
}

Result<void> read_output(const Reader& reader, const std::string& key, const Node& value,
                         const std::string& sub, const std::filesystem::path& dir, Phase& p) {
  if (key == "output") return detail::assign(reader.name(value, sub), p.output);
  if (key == "output_path") return detail::assign(reader.relative_path(value, sub), p.output_path);
  if (key == "output_schema") {
    KERNEX_ASSIGN_OR_RETURN(p.output_schema,
                            read_schema(reader, value, sub, dir, p.output_schema_file));
    return {};
  }
  if (key == "verdict_schema") {
    std::string file;
    KERNEX_ASSIGN_OR_RETURN(p.verdict_schema, read_schema(reader, value, sub, dir, file));
    return {};
  }
  KERNEX_ASSIGN_OR_RETURN(auto t, reader.string(value, sub));  // output_type
  if (t == "text")
    p.output_type = ArtifactType::Text;
  else if (t == "json")
    p.output_type = ArtifactType::Json;
  else if (t == "file")
    p.output_type = ArtifactType::File;
  else
    return reader.err(value, sub, "expected text, json or file");
  return {};
}

Result<void> read_phase_key(const Reader& reader, const std::string& key, const Node& value,
                            const std::string& sub, const std::filesystem::path& dir, Phase& p,
                            bool& has_max) {
  if (key == "name") return detail::assign(reader.name(value, sub), p.name);
  if (key == "agent") return detail::assign(reader.name(value, sub), p.agent);
  if (key == "phase_type") return detail::assign(phase_type(reader, value, sub), p.type);
  if (key == "model_tier") return detail::assign(reader.name(value, sub), p.model_tier);
  if (key == "parallel_group") return detail::assign(reader.name(value, sub), p.parallel_group);
  if (key == "prompt") return detail::assign(reader.string(value, sub), p.instructions);
  if (key == "map_over") return detail::assign(reader.name(value, sub), p.map_over);
  if (key == "max_turns" || key == "max_items" || key == "concurrency" || key == "max_handoffs" ||
      key == "retries" || key == "backoff_ms") {
    const std::int64_t max = key == "max_turns"      ? 10'000
                             : key == "max_items"    ? kMaxMapItems
                             : key == "concurrency"  ? kMaxGroupSize
                             : key == "max_handoffs" ? kMaxHandoffs
                             : key == "retries"      ? kMaxRetries
                                                     : kMaxBackoffMs;
    KERNEX_ASSIGN_OR_RETURN(auto n, reader.integer(value, sub, key == "concurrency" ? 1 : 0, max));
    const auto v = static_cast<std::uint32_t>(n);
    if (key == "max_turns") p.max_turns = v;
    if (key == "max_items") p.max_items = v;
    if (key == "concurrency") p.concurrency = v;
    if (key == "max_handoffs") p.max_handoffs = v;
    if (key == "retries") p.retries = v;
    if (key == "backoff_ms") p.backoff_ms = v;
    return {};
  }
  if (key == "inputs" || key == "handoffs") {
    KERNEX_ASSIGN_OR_RETURN(auto list, reader.strings(value, sub, 64));
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (!valid_name(list[i]))
        return reader.err(value, sub + "[" + std::to_string(i) + "]",
                          "\"" + list[i].substr(0, 80) + "\" is not a valid name");
    }
    (key == "inputs" ? p.inputs : p.handoffs) = std::move(list);
    return {};
  }
  if (key == "retry") return read_retry(reader, value, sub, p, has_max);
  if (key == "pre_validation" || key == "post_validation") {
    KERNEX_ASSIGN_OR_RETURN(auto list, read_validations(reader, value, sub, dir));
    (key == "pre_validation" ? p.pre_validation : p.post_validation) = std::move(list);
    return {};
  }
  return read_output(reader, key, value, sub, dir, p);
}

// A phase's own rules: what its type needs, and the bounds of its loop.
Result<void> finish_phase(const Reader& reader, const Node& node, const std::string& path, Phase& p,
                          bool has_max) {
  if (p.name.empty()) return reader.err(node, path, "`name` is required");
  if (p.agent.empty()) return reader.err(node, path, "`agent` is required");
  if (p.output.empty()) p.output = p.name;
  if (p.type == PhaseType::CorrectiveLoop) {
    if (!has_max || p.fix_agent.empty())
      return reader.err(node, path,
                        "a corrective-loop needs [retry] with `max` (its bound) and `fix_agent`");
    if (p.max_rounds < 1 || p.max_rounds > kMaxLoopRounds)
      return reader.err(node, path + ".retry.max",
                        "a loop runs 1 to " + std::to_string(kMaxLoopRounds) + " rounds, not " +
                            std::to_string(p.max_rounds));
    if (p.output_type == ArtifactType::File)
      return reader.err(node, path, "a corrective loop's output is its verdict (text or json)");
    p.output_type = ArtifactType::Json;  // the passing verdict, a JSON object
  } else if (has_max) {
    if (!p.fix_agent.empty())
      return reader.err(node, path + ".retry.fix_agent", "only a corrective-loop has a fix_agent");
    if (p.max_rounds > kMaxRetries)
      return reader.err(node, path + ".retry.max",
                        "at most " + std::to_string(kMaxRetries) + " retries");
    p.retries = p.max_rounds;
    p.max_rounds = 0;
  }
  if (p.type == PhaseType::Map && p.output_type == ArtifactType::File)
    return reader.err(node, path, "a map phase's output is the array of its items' answers");
  if (p.type == PhaseType::Map && p.map_over.empty())
    return reader.err(node, path, "a map phase needs `map_over` (a JSON array artifact)");
  if (p.type != PhaseType::Map && !p.map_over.empty())
    return reader.err(node, path, "`map_over` is for map phases");
  if (p.type == PhaseType::Handoff && p.handoffs.empty())
    return reader.err(node, path, "a handoff phase needs `handoffs` (the agents it may pass to)");
  if (p.output_type == ArtifactType::File && p.output_path.empty())
    return reader.err(node, path, "a file output needs `output_path`");
  if (!p.output_schema.is_null() && p.output_type != ArtifactType::Json)
    return reader.err(node, path, "`output_schema` needs output_type = \"json\"");
  return {};
}

Result<Phase> read_phase(const Reader& reader, const Node& node, const std::string& path,
                         const std::filesystem::path& dir) {
  Phase p;
  p.line = node.line;
  bool has_max = false;
  KERNEX_RETURN_IF_ERROR(reader.each_key(
      node, path,
      {"name",           "agent",       "phase_type",     "model_tier",      "max_turns",
       "parallel_group", "prompt",      "inputs",         "output",          "output_type",
       "output_schema",  "output_path", "pre_validation", "post_validation", "retry",
       "retries",        "backoff_ms",  "verdict_schema", "map_over",        "max_items",
       "concurrency",    "handoffs",    "max_handoffs"},
      [&](const std::string& key, const Node& value, const std::string& sub) {
        return read_phase_key(reader, key, value, sub, dir, p, has_max);
      }));
  KERNEX_RETURN_IF_ERROR(finish_phase(reader, node, path, p, has_max));
  return p;
}

Result<void> read_header(const Reader& reader, const Node& node, Topology& out) {
  bool name = false, description = false, version = false;
  KERNEX_RETURN_IF_ERROR(reader.each_key(
      node, "topology", {"name", "description", "version"},
      [&](const std::string& key, const Node& value, const std::string& sub) -> Result<void> {
        if (key == "name") {
          name = true;
          return detail::assign(reader.name(value, sub), out.name);
        }
        if (key == "description") {
          description = true;
          return detail::assign(reader.string(value, sub), out.description);
        }
        version = true;
        return detail::assign(reader.integer(value, sub, 0, 1'000'000), out.version);
      }));
  for (auto [present, field] : {std::pair{name, "name"}, std::pair{description, "description"},
                                std::pair{version, "version"}}) {
    if (!present) return reader.err(node, "topology", std::string("`") + field + "` is required");
  }
  return {};
}

Result<void> read_phases(const Reader& reader, const Node& node, Topology& out) {
  if (node.kind != Node::Kind::List)
    return reader.err(node, "phases", "expected an array of tables ([[phases]])");
  if (node.items.size() > kMaxPhases)
    return reader.err(node, "phases",
                      std::to_string(node.items.size()) + " phases; a topology has at most " +
                          std::to_string(kMaxPhases));
  if (node.items.empty()) return reader.err(node, "phases", "a topology needs at least one phase");
  for (std::size_t i = 0; i < node.items.size(); ++i) {
    KERNEX_ASSIGN_OR_RETURN(auto phase, read_phase(reader, node.items[i],
                                                   "phases[" + std::to_string(i) + "]", out.dir));
    out.phases.push_back(std::move(phase));
  }
  return {};
}

Result<Node> parse_tree(std::string_view text, bool yaml, const std::string& file) {
  skills::detail::ParseFailure failure;
  auto root = yaml ? skills::detail::parse_yaml(text, false, 1, failure)
                   : skills::detail::parse_toml(text, 1, failure);
  if (!root) {
    return fail(ErrorCode::Config, file + ":" + std::to_string(failure.line) + ":" +
                                       std::to_string(failure.column + 1) + ": " +
                                       (yaml ? "invalid YAML: " : "invalid TOML: ") +
                                       failure.message);
  }
  return std::move(*root);
}

}  // namespace

Result<Topology> parse(std::string_view text, bool yaml, const std::filesystem::path& file,
                       const std::filesystem::path& dir) {
  const Reader reader(file.string());
  KERNEX_ASSIGN_OR_RETURN(auto root, parse_tree(text, yaml, file.string()));
  Topology out;
  out.dir = dir;
  out.file = file;
  const Node* header = root.is_map() ? root.find("topology") : nullptr;
  if (header == nullptr) return reader.err(root, "", "a [topology] table is required");
  const Node* phases = root.find("phases");
  if (phases == nullptr) return reader.err(root, "", "[[phases]] are required");
  KERNEX_RETURN_IF_ERROR(reader.each_key(
      root, "", {"topology", "phases", "agents", "limits"},
      [&](const std::string& key, const Node& value, const std::string&) -> Result<void> {
        if (key == "topology") return read_header(reader, value, out);
        if (key == "phases") return read_phases(reader, value, out);
        if (key == "agents") return detail::read_agents(reader, value, out);
        return detail::read_limits(reader, value, "limits", out.limits);
      }));
  KERNEX_RETURN_IF_ERROR(detail::load_agents(out, reader, *phases));
  KERNEX_RETURN_IF_ERROR(detail::check_graph(out, reader, *phases));
  return out;
}

}  // namespace kernex::topology
