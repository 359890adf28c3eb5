// Creating and opening an overlay's layer directory; status, diff, accept and reject entry points.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <system_error>

#include "overlay_state.hpp"
#include "trash.hpp"

namespace kernex::workspace {

namespace fs = std::filesystem;
using detail::Fd;

namespace {

constexpr std::uint64_t kMaxMetaBytes = 64 << 10;

std::string quoted(const fs::path& path) {
  return Json(path.string()).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string_view xattr_name(XattrNamespace ns) {
  return ns == XattrNamespace::Trusted ? "trusted" : "user";
}

// Makes `layer` (0700); an existing one must be an empty directory.
Result<void> make_layer_dir(const fs::path& layer) {
  std::error_code ec;
  fs::create_directories(layer.parent_path(), ec);
  if (ec)
    return fail(ErrorCode::Io,
                "layer directory " + quoted(layer) + ": cannot create its parent: " + ec.message());
  if (::mkdir(layer.c_str(), 0700) == 0) return {};
  if (errno != EEXIST)
    return fail(ErrorCode::Io, "layer directory " + quoted(layer) +
                                   ": cannot create: " + detail::errno_text(errno));
  struct stat st {};
  if (::lstat(layer.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || !fs::is_empty(layer, ec))
    return fail(ErrorCode::Usage,
                "layer directory " + quoted(layer) + " exists and is not an empty directory");
  return {};
}

Json meta_json(const Overlay::State& s) {
  return Json{{"version", 1},
              {"lower", s.lower.string()},
              {"session", s.session},
              {"created_ms", s.created_ms},
              {"xattr", xattr_name(s.xattr)}};
}

Result<void> read_manifest(Overlay::State& s, int layer_fd) {
  const std::string where =
      detail::label("overlay manifest", s.layer.string(), detail::kManifestFile);
  KERNEX_ASSIGN_OR_RETURN(Fd fd,
                          detail::open_regular_at(layer_fd, detail::kManifestFile, where, nullptr));
  // A line is at most an entry's numbers and a PATH_MAX path, escaped.
  const std::uint64_t cap = static_cast<std::uint64_t>(s.limits.max_entries + 1) * 1024 + 4096;
  KERNEX_ASSIGN_OR_RETURN(std::string text, detail::read_all(fd.get(), cap, where));
  KERNEX_ASSIGN_OR_RETURN(s.manifest, detail::parse_manifest(text, where, s.limits));
  return {};
}

}  // namespace

namespace detail {

Result<void> read_meta(Overlay::State& s, int layer_fd) {
  const std::string where = label("overlay meta file", s.layer.string(), kMetaFile);
  KERNEX_ASSIGN_OR_RETURN(Fd fd, open_regular_at(layer_fd, kMetaFile, where, nullptr));
  KERNEX_ASSIGN_OR_RETURN(std::string text, read_all(fd.get(), kMaxMetaBytes, where));
  const Json meta = parse_untrusted(text);
  auto field = [&](const char* name, auto is) { return meta.contains(name) && is(meta[name]); };
  if (!meta.is_object() || !field("version", [](const Json& j) { return j == 1; }) ||
      !field("lower", [](const Json& j) { return j.is_string(); }) ||
      !field("session", [](const Json& j) { return j.is_string(); }) ||
      !field("created_ms", [](const Json& j) { return j.is_number_integer(); }) ||
      !field("xattr", [](const Json& j) { return j == "trusted" || j == "user"; }))
    return fail(ErrorCode::Parse, where +
                                      ": expected {\"version\": 1, \"lower\": string, \"session\": "
                                      "string, \"created_ms\": integer, \"xattr\": "
                                      "\"trusted\"|\"user\"}");
  s.lower = meta["lower"].get<std::string>();
  s.session = meta["session"].get<std::string>();
  s.created_ms = meta["created_ms"].get<std::int64_t>();
  s.xattr = meta["xattr"] == "trusted" ? XattrNamespace::Trusted : XattrNamespace::User;
  if (!s.lower.is_absolute())
    return fail(ErrorCode::Parse, where + ": \"lower\" is not an absolute path");
  return {};
}

Result<OpenLayers> open_layers(const Overlay::State& state) {
  OpenLayers out;
  KERNEX_ASSIGN_OR_RETURN(out.layer_dir, open_root(state.layer.string(), "layer directory"));
  KERNEX_ASSIGN_OR_RETURN(out.lower, open_root(state.lower.string(), "real tree"));
  KERNEX_ASSIGN_OR_RETURN(out.upper,
                          open_dir_beneath(out.layer_dir.get(), "upper",
                                           label("upper layer", state.layer.string(), "upper")));
  out.layers.lower = out.lower.get();
  out.layers.upper = out.upper.get();
  out.layers.lower_path = state.lower.string();
  out.layers.upper_path = (state.layer / "upper").string();
  out.layers.xattr = state.xattr;
  out.layers.limits = &state.limits;
  out.layers.manifest = &state.manifest;
  return out;
}

Result<std::vector<bool>> match_changes(const std::vector<Planned>& all,
                                        const std::vector<std::string>& paths) {
  std::vector<std::string> wanted;
  for (const std::string& raw : paths) {
    std::string p = raw;
    while (p.starts_with("./")) p.erase(0, 2);
    while (p.size() > 1 && p.ends_with('/')) p.pop_back();
    if (p == "." || p.empty()) return std::vector<bool>(all.size(), true);
    std::vector<std::string_view> parts;
    if (!split_relative(p, parts))
      return fail(ErrorCode::Usage,
                  "path " + Json(raw).dump(-1, ' ', false, Json::error_handler_t::replace) +
                      " is not a relative path inside the workspace");
    wanted.push_back(std::move(p));
  }
  std::vector<bool> out(all.size(), wanted.empty());
  for (std::size_t i = 0; i < all.size(); ++i) {
    const Change& c = all[i].change;
    for (const std::string& w : wanted) {
      if (at_or_below(c.path, w) || (c.kind == ChangeKind::Renamed && at_or_below(c.from, w)))
        out[i] = true;
    }
  }
  return out;
}

Result<std::vector<Planned>> select_changes(std::vector<Planned> all,
                                            const std::vector<std::string>& paths) {
  KERNEX_ASSIGN_OR_RETURN(const std::vector<bool> chosen, match_changes(all, paths));
  std::vector<Planned> out;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (chosen[i]) out.push_back(std::move(all[i]));
  return out;
}

}  // namespace detail

Overlay::Overlay(std::unique_ptr<State> state) : state_(std::move(state)) {}
Overlay::Overlay(Overlay&&) noexcept = default;
Overlay& Overlay::operator=(Overlay&&) noexcept = default;
Overlay::~Overlay() = default;

const fs::path& Overlay::lower() const { return state_->lower; }
const fs::path& Overlay::layer_dir() const { return state_->layer; }
const std::string& Overlay::session_id() const { return state_->session; }
XattrNamespace Overlay::xattr_namespace() const { return state_->xattr; }

Result<Overlay> Overlay::create(const fs::path& lower, const fs::path& layer_dir,
                                const CreateOptions& options) {
  auto s = std::make_unique<State>();
  std::error_code ec;
  s->lower = fs::canonical(lower, ec);
  if (ec) return fail(ErrorCode::Io, "real tree " + quoted(lower) + ": " + ec.message());
  s->layer = fs::absolute(layer_dir, ec).lexically_normal();
  if (ec) return fail(ErrorCode::Io, "layer directory " + quoted(layer_dir) + ": " + ec.message());
  const fs::path layer_real = fs::weakly_canonical(s->layer, ec);
  if (!ec && detail::at_or_below(layer_real.string(), s->lower.string()))
    return fail(ErrorCode::Usage, "layer directory " + quoted(s->layer) +
                                      " lies inside the real tree " + quoted(s->lower));
  s->session = options.session_id;
  s->limits = options.limits;
  s->xattr =
      options.xattr.value_or(::geteuid() == 0 ? XattrNamespace::Trusted : XattrNamespace::User);
  s->created_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  KERNEX_ASSIGN_OR_RETURN(s->manifest, detail::scan_tree(s->lower.string(), s->limits));
  KERNEX_RETURN_IF_ERROR(make_layer_dir(s->layer));
  KERNEX_ASSIGN_OR_RETURN(Fd dir, detail::open_root(s->layer.string(), "layer directory"));
  for (const char* sub : {"upper", "work"}) {
    if (::mkdirat(dir.get(), sub, 0700) != 0)
      return fail(ErrorCode::Io, detail::label("layer directory", s->layer.string(), sub) +
                                     ": cannot create: " + detail::errno_text(errno));
  }
  const std::string where = detail::label("overlay manifest", s->layer.string(), "manifest");
  KERNEX_RETURN_IF_ERROR(detail::write_file_atomic(dir.get(), detail::kManifestFile,
                                                   detail::format_manifest(s->manifest), where));
  KERNEX_RETURN_IF_ERROR(detail::write_file_atomic(
      dir.get(), detail::kMetaFile,
      meta_json(*s).dump(2, ' ', false, Json::error_handler_t::replace) + "\n",
      detail::label("overlay meta file", s->layer.string(), detail::kMetaFile)));
  return Overlay(std::move(s));
}

Result<Overlay> Overlay::open(const fs::path& layer_dir, OverlayLimits limits) {
  auto s = std::make_unique<State>();
  std::error_code ec;
  s->layer = fs::absolute(layer_dir, ec).lexically_normal();
  if (ec) return fail(ErrorCode::Io, "layer directory " + quoted(layer_dir) + ": " + ec.message());
  s->limits = limits;
  KERNEX_ASSIGN_OR_RETURN(Fd dir, detail::open_root(s->layer.string(), "layer directory"));
  KERNEX_RETURN_IF_ERROR(detail::read_meta(*s, dir.get()));
  KERNEX_RETURN_IF_ERROR(read_manifest(*s, dir.get()));
  if (detail::has_trash(dir.get()))  // an accept's process died before its trash was removed
    s->trash_remover = std::jthread([layer = s->layer] { detail::empty_trash(layer); });
  return Overlay(std::move(s));
}

Result<Status> Overlay::status() const {
  KERNEX_ASSIGN_OR_RETURN(auto open, detail::open_layers(*state_));
  KERNEX_ASSIGN_OR_RETURN(auto view, detail::read_layer(open.layers));
  KERNEX_ASSIGN_OR_RETURN(auto planned, detail::plan_changes(open.layers, view));
  Status out;
  for (auto& p : planned) out.changes.push_back(std::move(p.change));
  return out;
}

Result<std::string> Overlay::diff(const std::vector<std::string>& paths) const {
  KERNEX_ASSIGN_OR_RETURN(auto open, detail::open_layers(*state_));
  KERNEX_ASSIGN_OR_RETURN(auto view, detail::read_layer(open.layers));
  KERNEX_ASSIGN_OR_RETURN(auto planned, detail::plan_changes(open.layers, view));
  KERNEX_ASSIGN_OR_RETURN(auto selected, detail::select_changes(std::move(planned), paths));
  return detail::diff_changes(open.layers, selected);
}

Result<AcceptResult> Overlay::accept(const std::vector<std::string>& paths, bool force,
                                     const KernelGuard& guard) {
  KERNEX_ASSIGN_OR_RETURN(auto open, detail::open_layers(*state_));
  auto result = detail::accept_changes(*state_, open, paths, force, guard);
  // After the previous removal (a jthread assigned to joins first), off the caller's time.
  state_->trash_remover = std::jthread([layer = state_->layer] { detail::empty_trash(layer); });
  return result;
}

Result<void> Overlay::reject() {
  state_->trash_remover = std::jthread();  // joined: it works inside the directory removed here
  const fs::path parent = state_->layer.parent_path();
  KERNEX_ASSIGN_OR_RETURN(Fd dir, detail::open_root(parent.string(), "layer directory's parent"));
  return detail::remove_tree(dir.get(), state_->layer.filename().string(),
                             "layer directory " + quoted(state_->layer));
}

}  // namespace kernex::workspace
