// Overlay mode for `kernex run` and `kernex rlm` (workspace.mode: overlay, or --overlay): the
// current directory is the real tree, and every sandboxed tool of the run writes into the
// session's layer under <data_dir>/overlays instead, where `kernex workspace` reviews it.
#include <iostream>

#include "commands.hpp"
#include "kernex/skills/trust.hpp"
#include "kernex/skills/workspace_guard.hpp"
#include "kernex/workspace/sessions.hpp"
#include "terminal_text.hpp"

namespace kernex::cli {

namespace {

// The CLI's session: one per project, as its conversations are ("cli", "cli-<project>"), so a
// later run sees what the earlier ones wrote until they are accepted or rejected.
std::string cli_session(const Config& config) {
  std::string id = "cli";
  if (config.project.empty()) return id;
  id += '-';
  for (char c : config.project) {
    const bool plain =
        std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':' || c == '-';
    id += plain ? c : '_';
  }
  return id.substr(0, 128);
}

}  // namespace

Result<void> use_workspace_mode(const Config& config, RunOptions& options) {
  if (config.workspace_mode != WorkspaceMode::Overlay) return {};
  std::error_code ec;
  const auto cwd = std::filesystem::current_path(ec);
  if (ec) return fail(ErrorCode::Io, "overlay mode: no current directory: " + ec.message());
  const std::string session = cli_session(config);
  KERNEX_ASSIGN_OR_RETURN(
      auto overlay,
      workspace::session_overlay(workspace::overlays_dir(config.data_dir), session, cwd));
  options.workspace = overlay.lower();
  options.workspace_layers = overlay.layer_dir();
  // A trusted skill this run does not load is still the kernel's: bound from the real tree.
  skills::protect_trusted_folders_in(overlay.lower(), config.data_dir / skills::kTrustFileName);
  std::cerr << for_terminal("kernex: overlay: writes go to " + overlay.layer_dir().string() +
                            " (kernex workspace status --session " + session + ")")
            << '\n';
  return {};
}

}  // namespace kernex::cli
