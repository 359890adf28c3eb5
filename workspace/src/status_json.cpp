// Names and JSON forms of statuses and accept results (`kernex workspace ... --json`).
#include "kernex/workspace/overlay.hpp"

namespace kernex::workspace {

namespace {

// Paths are bytes; JSON needs UTF-8, so invalid sequences become U+FFFD.
Json path_json(const std::string& path) {
  return Json::parse(Json(path).dump(-1, ' ', false, Json::error_handler_t::replace));
}

Json issues_json(const std::vector<PathIssue>& issues) {
  Json out = Json::array();
  for (const PathIssue& i : issues)
    out.push_back({{"path", path_json(i.path)}, {"reason", i.reason}});
  return out;
}

}  // namespace

// Indexed by the enums' values, in declaration order.
constexpr std::string_view kChangeKinds[] = {"added",        "deleted",      "modified",
                                             "mode_changed", "type_changed", "renamed"};
constexpr std::string_view kEntryTypes[] = {"none", "file", "symlink", "dir", "other"};

std::string_view to_string(ChangeKind kind) { return kChangeKinds[static_cast<std::size_t>(kind)]; }

std::string_view to_string(EntryType type) { return kEntryTypes[static_cast<std::size_t>(type)]; }

Json to_json(const Change& c) {
  Json out{{"path", path_json(c.path)}, {"kind", to_string(c.kind)}};
  if (c.kind == ChangeKind::Renamed) out["from"] = path_json(c.from);
  if (c.old_type != EntryType::None) {
    out["old_type"] = to_string(c.old_type);
    out["old_mode"] = c.old_mode;
  }
  if (c.new_type != EntryType::None) {
    out["new_type"] = to_string(c.new_type);
    out["new_mode"] = c.new_mode;
  }
  return out;
}

Json to_json(const Status& status) {
  Json changes = Json::array();
  for (const Change& c : status.changes) changes.push_back(to_json(c));
  return Json{{"changes", changes}};
}

Json to_json(const AcceptResult& r) {
  Json applied = Json::array();
  for (const std::string& p : r.applied) applied.push_back(path_json(p));
  Json out{{"applied", applied},
           {"conflicts", issues_json(r.conflicts)},
           {"refused", issues_json(r.refused)}};
  if (!r.kernel_landed.empty()) {
    Json landed = Json::array();
    for (const std::string& p : r.kernel_landed) landed.push_back(path_json(p));
    out["kernel_landed"] = landed;
  }
  return out;
}

}  // namespace kernex::workspace
