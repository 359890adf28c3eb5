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

std::string_view to_string(ChangeKind kind) {
  switch (kind) {
    case ChangeKind::Added:
      return "added";
    case ChangeKind::Deleted:
      return "deleted";
    case ChangeKind::Modified:
      return "modified";
    case ChangeKind::ModeChanged:
      return "mode_changed";
    case ChangeKind::TypeChanged:
      return "type_changed";
    case ChangeKind::Renamed:
      return "renamed";
  }
  return "unknown";
}

std::string_view to_string(EntryType type) {
  switch (type) {
    case EntryType::None:
      return "none";
    case EntryType::File:
      return "file";
    case EntryType::Symlink:
      return "symlink";
    case EntryType::Dir:
      return "dir";
    case EntryType::Other:
      return "other";
  }
  return "unknown";
}

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
  return Json{{"applied", applied},
              {"conflicts", issues_json(r.conflicts)},
              {"refused", issues_json(r.refused)}};
}

}  // namespace kernex::workspace
