// Overlay mode in kernex serve: the session's layer for a run, the workspace_changed events, and
// the review routes (status, diff, accept, reject).
#include "session_overlay.hpp"

#include <sys/stat.h>

#include <map>
#include <mutex>
#include <tuple>

#include "api.hpp"
#include "kernex/skills/trust.hpp"
#include "kernex/skills/workspace_guard.hpp"
#include "kernex/workspace/forget.hpp"
#include "kernex/workspace/sessions.hpp"
#include "runs.hpp"
#include "session_id.hpp"

namespace kernex::server {

namespace fs = std::filesystem;
namespace ws = kernex::workspace;

namespace {

// What identifies an entry's state in the upper layer: a write, chmod, rename or whiteout changes
// one of these (ctime moves with every change of content or metadata).
using EntryStamp = std::tuple<std::int64_t, std::int64_t, std::int64_t, ino_t, mode_t>;
using UpperStamps = std::map<std::string, EntryStamp>;

// Every entry of upper/ with its stamp; a walk of what the session wrote, not of the workspace.
UpperStamps stamp_upper(const fs::path& upper) {
  constexpr std::size_t kMaxEntries = 200'000;
  UpperStamps out;
  std::error_code ec;
  for (fs::recursive_directory_iterator
           it(upper, fs::directory_options::skip_permission_denied, ec),
       end;
       !ec && it != end && out.size() < kMaxEntries; it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0) continue;
    out[it->path().lexically_relative(upper).string()] =
        EntryStamp{st.st_ctim.tv_sec * 1'000'000'000LL + st.st_ctim.tv_nsec,
                   st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec,
                   static_cast<std::int64_t>(st.st_size), st.st_ino, st.st_mode};
  }
  return out;
}

// Paths added, changed or gone between two walks. Directories whose only change is an entry
// below them (their mtime) are left out: the entry names itself.
std::vector<std::string> changed_paths(const UpperStamps& before, const UpperStamps& after) {
  std::vector<std::string> out;
  auto is_dir = [](const EntryStamp& s) { return S_ISDIR(std::get<4>(s)); };
  for (const auto& [path, stamp] : after) {
    auto it = before.find(path);
    if (it == before.end() || (it->second != stamp && !(is_dir(stamp) && is_dir(it->second))))
      out.push_back(path);
  }
  for (const auto& [path, stamp] : before)
    if (!after.contains(path)) out.push_back(path);
  std::sort(out.begin(), out.end());
  return out;
}

StreamSink with_workspace_events(StreamSink inner, RunState& run, const fs::path& upper) {
  struct Watch {
    std::mutex mutex;
    UpperStamps last;
  };
  auto watch = std::make_shared<Watch>();
  watch->last = stamp_upper(upper);
  return [inner = std::move(inner), &run, upper, watch](const StreamEvent& e) {
    if (inner) inner(e);
    if (e.kind != StreamEvent::Kind::ToolResult) return;
    std::lock_guard lock(watch->mutex);
    UpperStamps now = stamp_upper(upper);
    std::vector<std::string> paths = changed_paths(watch->last, now);
    watch->last = std::move(now);
    if (paths.empty()) return;
    run.append("workspace_changed", {{"run_id", run.id},
                                     {"session_id", run.session},
                                     {"tool_call_id", e.tool_call_id},
                                     {"paths", paths}});
  };
}

// Accept and reject change layers a run may have mounted: one at a time in this process.
std::mutex& review_mutex() {
  static std::mutex m;
  return m;
}

HttpReply from_error(const Error& e) {
  const int status = e.code == ErrorCode::Usage ? 400 : 500;
  return HttpReply::error(
      api_error(status, status == 400 ? "invalid_request" : "workspace_failed", e.describe()));
}

bool wants_json(const HttpRequest& req) {
  auto it = req.query.find("format");
  if (it != req.query.end()) return it->second == "json";
  return req.header("accept").find("application/json") != std::string::npos;
}

// {paths?: [string...], force?: bool | [string...]}; anything else is a 400 naming it. A force
// list forces those paths only: a change over a kernel file or trusted skill lands only when named
// there (ws::KernelGuard); `true` forces conflicts, never a kernel path.
struct AcceptBody {
  std::vector<std::string> paths;
  bool force = false;
  std::vector<std::string> forced;
};

std::expected<std::vector<std::string>, ApiError> string_list(const Json& value,
                                                              const std::string& key) {
  std::vector<std::string> out;
  for (const auto& p : value) {
    if (!p.is_string())
      return std::unexpected(api_error(400, "invalid_request", key + ": expected strings"));
    out.push_back(p.get<std::string>());
  }
  return out;
}

std::expected<AcceptBody, ApiError> accept_body(const std::string& text) {
  AcceptBody out;
  if (text.empty()) return out;
  auto body = parse_body(text);
  if (!body) return std::unexpected(body.error());
  for (const auto& [key, value] : body->items()) {
    if (key == "force" && value.is_boolean()) {
      out.force = value.get<bool>();
    } else if (key == "force" && value.is_array()) {
      auto list = string_list(value, key);
      if (!list) return std::unexpected(list.error());
      out.forced = std::move(*list);
      out.force = !out.forced.empty();
    } else if (key == "paths" && value.is_array()) {
      auto list = string_list(value, key);
      if (!list) return std::unexpected(list.error());
      out.paths = std::move(*list);
    } else {
      return std::unexpected(api_error(400, "invalid_request",
                                       "field '" + key +
                                           "': expected paths (a list of strings) or force "
                                           "(true, false or a list of paths)"));
    }
  }
  return out;
}

// Accept with the kernel paths of the real tree guarded; trust in what a forced change landed
// over is forgotten (the reply's `untrusted`).
HttpReply accept(const HttpRequest& req, ws::Overlay& overlay, const std::string& session,
                 const fs::path& data_dir) {
  auto body = accept_body(req.body);
  if (!body) return HttpReply::error(body.error());
  const fs::path store = data_dir / skills::kTrustFileName;
  ws::KernelGuard guard{skills::kernel_paths_in(overlay.lower(), store), body->forced};
  auto outcome = ws::accept_and_retire(overlay, body->paths, body->force, guard);
  if (!outcome) return from_error(outcome.error());
  auto forgotten = skills::untrust_landed(overlay.lower(), store, outcome->result.kernel_landed);
  if (!forgotten) return from_error(forgotten.error());
  Json out = ws::to_json(outcome->result);
  out["session_id"] = session;
  out["layer_removed"] = outcome->dropped;
  if (!forgotten->empty()) out["untrusted"] = *forgotten;
  return HttpReply::json(200, out);
}

HttpReply review(const HttpRequest& req, ws::Overlay& overlay, const std::string& session,
                 const std::string& action, const fs::path& data_dir) {
  if (action.empty()) {
    auto status = overlay.status();
    if (!status) return from_error(status.error());
    Json out = ws::to_json(*status);
    out["session_id"] = session;
    return HttpReply::json(200, out);
  }
  if (action == "diff") {
    auto diff = overlay.diff();
    if (!diff) return from_error(diff.error());
    if (wants_json(req)) return HttpReply::json(200, {{"session_id", session}, {"diff", *diff}});
    HttpReply r;
    r.content_type = "text/x-diff; charset=utf-8";
    r.body = std::move(*diff);
    return r;
  }
  if (action == "accept") return accept(req, overlay, session, data_dir);
  if (auto r = overlay.reject(); !r) return from_error(r.error());
  return HttpReply::json(200, {{"session_id", session}, {"rejected", true}});
}

}  // namespace

fs::path tenant_overlays(const Config& config, const std::string& tenant) {
  return ws::overlays_dir(config.data_dir) / "tenants" / tenant;
}

Result<void> forget_session_overlays(const Config& config, const std::string& tenant,
                                     const std::string& session) {
  std::lock_guard lock(review_mutex());
  return ws::remove_session_layers(tenant_overlays(config, tenant), session_dir_name(session));
}

Result<void> use_session_overlay(const Config& config, RunState& run, const std::string& session,
                                 const fs::path& workspace, RunOptions& options) {
  if (config.workspace_mode != WorkspaceMode::Overlay || session.empty()) return {};
  std::error_code ec;
  fs::create_directories(workspace, ec);  // the real tree must exist to be listed
  if (ec)
    return fail(ErrorCode::Io,
                "workspace '" + workspace.string() + "': cannot create: " + ec.message());
  std::lock_guard lock(review_mutex());
  KERNEX_ASSIGN_OR_RETURN(auto overlay, ws::session_overlay(tenant_overlays(config, run.tenant),
                                                            session_dir_name(session), workspace));
  options.workspace = overlay.lower();
  options.workspace_layers = overlay.layer_dir();
  options.sink = with_workspace_events(std::move(options.sink), run, overlay.upper());
  return {};
}

namespace {

bool session_busy(Runs& runs, const std::string& tenant, const std::string& session) {
  auto recent = runs.session_runs(tenant, session, 8);  // newest first: an active run is here
  if (!recent) return true;                             // unknown: don't touch the layer
  for (const auto& r : (*recent)["runs"]) {
    const auto status = parse_run_status(r.value("status", ""));
    if (!status || !is_terminal(*status)) return true;
  }
  return false;
}

}  // namespace

HttpReply workspace_route(const HttpRequest& req, Runs& runs, const std::string& tenant,
                          const std::string& session, const std::vector<std::string>& rest) {
  const std::string action = rest.empty() ? "" : rest[0];
  const bool known = rest.size() <= 1 && (action.empty() || action == "diff" ||
                                          action == "accept" || action == "reject");
  if (!known) return HttpReply::error(api_error(404, "not_found", "no route " + req.path));
  const std::string method = action == "accept" || action == "reject" ? "POST" : "GET";
  if (req.method != method)
    return HttpReply::error(
        api_error(405, "method_not_allowed", req.method + " is not allowed on " + req.path));
  // Another tenant's session is not found here, as it is for the other session routes.
  const std::string none = "session '" + session + "' has no overlay workspace";
  if (!runs.session_exists(tenant, session))
    return HttpReply::error(api_error(404, "not_found", none));
  // Landing or dropping a layer under a live overlay mount is undefined for overlayfs: not while
  // one of the session's runs is queued, running or waiting for a person.
  if (method == "POST" && session_busy(runs, tenant, session))
    return HttpReply::error(api_error(
        409, "session_busy",
        "session '" + session + "' has a run in progress: accept or reject after it ends"));
  std::lock_guard lock(review_mutex());
  auto layer =
      ws::find_layer_in(tenant_overlays(runs.kernel().config(), tenant), session_dir_name(session));
  if (!layer) return HttpReply::error(api_error(404, "not_found", none));
  auto overlay = ws::Overlay::open(*layer);
  if (!overlay) return from_error(overlay.error());
  return review(req, *overlay, session, action, runs.kernel().config().data_dir);
}

}  // namespace kernex::server
