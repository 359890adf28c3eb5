// Artifacts between phases: what an agent is shown (only its phase's inputs), what its answer
// becomes (text, JSON checked against the phase's schema, or a workspace file read back), and the
// pre and post checks (kernex's file kinds, plus JSON Schema).
#include <sys/stat.h>

#include "kernex/files.hpp"
#include "run_context.hpp"
#include "schema.hpp"

namespace kernex::topology::detail {
namespace {

constexpr std::size_t kMaxArtifactBytes = 1u << 20;
constexpr std::size_t kMaxScannedEntries = 20'000;

std::string render(ArtifactType type, const Json& value) {
  if (type == ArtifactType::Text && value.is_string()) return value.get<std::string>();
  if (type == ArtifactType::File && value.is_object())
    return "(workspace file " + value.value("path", std::string()) + ")\n" +
           value.value("content", std::string());
  return value.dump(2, ' ', false, Json::error_handler_t::replace);
}

// The file at `rel` as the phase's agent sees it: in its overlay layer if it wrote it there,
// else in the shared workspace. Symbolic links are not followed.
std::optional<std::filesystem::path> find_file(const RunContext& ctx, const Phase& phase,
                                               const std::string& rel) {
  std::vector<std::filesystem::path> roots;
  if (ctx.topology.agents.at(phase.agent).workspace != WorkspaceView::Shared) {
    if (auto layer = layer_dir_of(ctx, phase.agent)) roots.push_back(*layer / "upper");
  }
  roots.push_back(ctx.options.workspace.empty() ? std::filesystem::path(".")
                                                : ctx.options.workspace);
  for (const auto& root : roots) {
    struct stat st {};
    const auto p = root / rel;
    if (::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return p;
  }
  return std::nullopt;
}

bool name_matches(const RunContext& ctx, const std::vector<std::string>& patterns) {
  const auto root =
      ctx.options.workspace.empty() ? std::filesystem::path(".") : ctx.options.workspace;
  std::error_code ec;
  std::size_t seen = 0;
  for (std::filesystem::recursive_directory_iterator it(root, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (++seen > kMaxScannedEntries) break;
    if (!it->is_regular_file(ec)) continue;
    const auto name = it->path().filename().string();
    for (const auto& p : patterns) {
      if (name.find(p) != std::string::npos) return true;
    }
  }
  return false;
}

Result<void> check_one(const RunContext& ctx, const Phase& phase, const Validation& v,
                       const Json& value, const std::string& where) {
  switch (v.kind) {
    case Validation::Kind::FileExists:
    case Validation::Kind::FileNotEmpty:
      for (const auto& rel : v.paths) {
        auto file = find_file(ctx, phase, rel);
        if (!file) return fail(ErrorCode::Tool, where + ": " + rel + " does not exist");
        std::error_code ec;
        if (v.kind == Validation::Kind::FileNotEmpty && std::filesystem::file_size(*file, ec) == 0)
          return fail(ErrorCode::Tool, where + ": " + rel + " is empty");
      }
      return {};
    case Validation::Kind::FilePatterns:
      if (!name_matches(ctx, v.patterns))
        return fail(ErrorCode::Tool, where + ": no file in the workspace has a name containing " +
                                         "one of the patterns");
      return {};
    case Validation::Kind::JsonSchema:
      return validate(v.schema, value, where + " (" + v.schema_file + ")");
  }
  return {};
}

}  // namespace

std::string phase_message(const RunContext& ctx, const Phase& phase, const std::string& agent,
                          const std::string& extra) {
  std::string m =
      "[topology " + ctx.topology.name + " · phase " + phase.name + " · agent " + agent + "]\n";
  if (!phase.instructions.empty()) m += phase.instructions + "\n";
  for (const auto& name : phase.inputs) {
    const auto type = ctx.types.at(name);
    m += "\n## Input `" + name + "` (" + std::string(to_string(type)) + ")\n" +
         render(type, ctx.artifacts.at(name)) + "\n";
  }
  if (!extra.empty()) m += "\n" + extra;
  if (phase.type == PhaseType::CorrectiveLoop) return m;
  if (phase.output_type == ArtifactType::Json) {
    m += "\nAnswer with one JSON value";
    if (!phase.output_schema.is_null())
      m += " matching this JSON Schema:\n" + phase.output_schema.dump();
    m += "\n";
  } else if (phase.output_type == ArtifactType::File) {
    m += "\nWrite your result to the workspace file " + phase.output_path + ".\n";
  }
  return m;
}

Result<Json> accept_output(const RunContext& ctx, const Phase& phase, const std::string& text) {
  const std::string where = "phase '" + phase.name + "' output '" + phase.output + "'";
  if (text.size() > kMaxArtifactBytes) return fail(ErrorCode::Limit, where + ": larger than 1 MiB");
  switch (phase.output_type) {
    case ArtifactType::Text:
      return Json(text);
    case ArtifactType::Json: {
      Json value = extract_json(text);
      if (value.is_discarded()) return fail(ErrorCode::Parse, where + ": the answer holds no JSON");
      KERNEX_RETURN_IF_ERROR(validate(phase.output_schema, value, where));
      return value;
    }
    case ArtifactType::File: {
      auto file = find_file(ctx, phase, phase.output_path);
      if (!file)
        return fail(ErrorCode::Tool, where + ": the agent did not write " + phase.output_path);
      auto content = read_regular_file(*file, "artifact file", kMaxArtifactBytes);
      if (!content) return fail(ErrorCode::Tool, where, content.error());
      return Json{{"path", phase.output_path}, {"content", *content}};
    }
  }
  return Json(text);
}

Result<void> check_validations(const RunContext& ctx, const Phase& phase,
                               const std::vector<Validation>& checks, const Json& value,
                               const char* when) {
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const std::string where =
        "phase '" + phase.name + "' " + when + "_validation[" + std::to_string(i) + "]";
    KERNEX_RETURN_IF_ERROR(check_one(ctx, phase, checks[i], value, where));
  }
  return {};
}

}  // namespace kernex::topology::detail
