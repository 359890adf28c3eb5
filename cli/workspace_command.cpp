// `kernex workspace status|diff|accept|reject`: review a session's overlay workspace and land it
// in the real tree or drop it. The layers live in <data_dir>/overlays/<session>.
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "terminal_text.hpp"
#include "kernex/config.hpp"
#include "kernex/skills/trust.hpp"
#include "kernex/skills/workspace_guard.hpp"
#include "kernex/workspace/overlay.hpp"
#include "kernex/workspace/sessions.hpp"

namespace kernex::cli {
namespace {

namespace ws = kernex::workspace;

struct WorkspaceArgs {
  std::optional<std::string> data_dir;
  std::string session;
  std::vector<std::string> paths;
  bool json = false;
  bool force = false;
  std::filesystem::path resolved_data_dir;  // set by open_overlay
};

Result<ws::Overlay> open_overlay(const ConfigFile& config_file, WorkspaceArgs& args) {
  std::filesystem::path data_dir;
  if (args.data_dir) {
    data_dir = *args.data_dir;
  } else {
    auto config = Config::load(config_file ? std::optional<std::filesystem::path>(*config_file)
                                           : std::nullopt);
    if (!config) return std::unexpected(config.error());
    data_dir = config->data_dir;
  }
  args.resolved_data_dir = data_dir;
  KERNEX_ASSIGN_OR_RETURN(auto layer, ws::find_layer_dir(data_dir, args.session));
  return ws::Overlay::open(layer);
}

void print_json_line(const Json& j) {
  std::cout << j.dump(-1, ' ', false, Json::error_handler_t::replace) << '\n';
}

// One line a change, in git status --short's spirit: A, D, M, R, T; a mode change says both.
std::string status_line(const ws::Change& c) {
  switch (c.kind) {
    case ws::ChangeKind::Added:
      return "A  " + c.path;
    case ws::ChangeKind::Deleted:
      return "D  " + c.path;
    case ws::ChangeKind::Renamed:
      return "R  " + c.from + " -> " + c.path;
    case ws::ChangeKind::TypeChanged:
      return "T  " + c.path + " (" + std::string(ws::to_string(c.old_type)) + " -> " +
             std::string(ws::to_string(c.new_type)) + ")";
    default:
      break;
  }
  std::string line = "M  " + c.path;
  if (c.old_mode != c.new_mode) {
    char modes[32];
    std::snprintf(modes, sizeof modes, " (mode %o -> %o)", c.old_mode, c.new_mode);
    line += modes;
  }
  return line;
}

int status(const ws::Overlay& overlay, bool json) {
  auto s = overlay.status();
  if (!s) return report(s.error());
  if (json) {
    Json out = ws::to_json(*s);
    out["session"] = overlay.session_id();
    out["lower"] = overlay.lower().string();
    print_json_line(out);
    return kExitOk;
  }
  if (s->changes.empty()) std::cout << "no changes in " << overlay.lower().string() << '\n';
  for (const auto& c : s->changes) std::cout << for_terminal(status_line(c)) << '\n';
  return kExitOk;
}

int diff(const ws::Overlay& overlay, const WorkspaceArgs& args) {
  auto d = overlay.diff(args.paths);
  if (!d) return report(d.error());
  if (args.json)
    print_json_line(Json{{"diff", *d}});
  else
    std::cout << for_terminal(*d);
  return kExitOk;
}

// Exit 7 when anything named was not applied (a conflict or a refusal).
// Once nothing is left, the layer goes: the session's next run starts a fresh one.
// Kernel paths (config, project files, registered kernel files, trusted skill folders) land only
// with --force and named among the PATHs; trust in what they landed over is then forgotten.
int accept(ws::Overlay& overlay, const WorkspaceArgs& args) {
  const auto store = args.resolved_data_dir / skills::kTrustFileName;
  ws::KernelGuard guard{skills::kernel_paths_in(overlay.lower(), store), {}};
  if (args.force) guard.forced = args.paths;
  auto outcome = ws::accept_and_retire(overlay, args.paths, args.force, guard);
  if (!outcome) return report(outcome.error());
  const ws::AcceptResult* r = &outcome->result;
  auto forgotten = skills::untrust_landed(overlay.lower(), store, r->kernel_landed);
  if (!forgotten) return report(forgotten.error());
  for (const auto& f : *forgotten)
    std::cerr << for_terminal("kernex: no longer trusted (landed over by force): " + f +
                              "; review it and run `kernex skills trust " + f + "`")
              << '\n';
  if (args.json) {
    Json out = ws::to_json(*r);
    out["layer_removed"] = outcome->dropped;
    print_json_line(out);
  } else {
    for (const auto& p : r->applied) std::cout << for_terminal("applied   " + p) << '\n';
    for (const auto& i : r->conflicts)
      std::cout << for_terminal("conflict  " + i.path + ": " + i.reason) << '\n';
    for (const auto& i : r->refused)
      std::cout << for_terminal("refused   " + i.path + ": " + i.reason) << '\n';
    if (!r->conflicts.empty()) std::cout << "(--force applies conflicting paths anyway)\n";
  }
  return r->conflicts.empty() && r->refused.empty() ? kExitOk : kExitTool;
}

int reject(ws::Overlay& overlay, bool json) {
  const std::string layer = overlay.layer_dir().string();
  if (auto r = overlay.reject(); !r) return report(r.error());
  if (json)
    print_json_line(Json{{"rejected", overlay.session_id()}, {"layer_dir", layer}});
  else
    std::cout << for_terminal("rejected: removed " + layer) << '\n';
  return kExitOk;
}

}  // namespace

CommandRun setup_workspace(Command command, std::string& config) {
  auto args = std::make_shared<WorkspaceArgs>();
  command.require_subcommand();
  Command status_cmd = command.add_subcommand("status", "List what the session changed");
  Command diff_cmd = command.add_subcommand("diff", "Print the changes as a unified diff");
  Command accept_cmd =
      command.add_subcommand("accept", "Apply the changes (all, or the PATHs) to the real tree");
  Command reject_cmd = command.add_subcommand("reject", "Discard the session's overlay");
  for (Command sub : {status_cmd, diff_cmd, accept_cmd, reject_cmd}) {
    sub.footer(kExitCodeHelp);
    add_config_option(sub, config, "kernex.yaml to read (its data_dir)");
    sub.add_option("--data-dir", args->data_dir,
                   "data directory (overrides data_dir and KERNEX_DATA_DIR)")
        .type_name("DIR");
    sub.add_option("--session", args->session,
                   "the session (default: the most recent one that has an overlay)")
        .type_name("S");
    sub.add_flag("--json", args->json, "print JSON");
  }
  for (Command sub : {diff_cmd, accept_cmd})
    sub.add_option("paths", args->paths, "paths in the workspace (default: all)").type_name("PATH");
  accept_cmd.add_flag("--force", args->force,
                      "apply paths that changed in the real tree since the session started, and "
                      "changes over kernel files or trusted skills among the PATHs named");
  return [=](const ConfigFile& config_file) {
    auto overlay = open_overlay(config_file, *args);
    if (!overlay) return report(overlay.error());
    if (status_cmd) return status(*overlay, args->json);
    if (diff_cmd) return diff(*overlay, *args);
    if (accept_cmd) return accept(*overlay, *args);
    return reject(*overlay, args->json);
  };
}

}  // namespace kernex::cli
