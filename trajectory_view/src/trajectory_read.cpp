#include <algorithm>
#include <map>
#include <sstream>

#include "kernex/files.hpp"
#include "kernex/trajectory_segments.hpp"
#include "kernex/trajectory_view.hpp"
#include "segment_read.hpp"

namespace kernex {
namespace {

namespace fs = std::filesystem;

std::string first_line(const std::string& text, std::size_t cap) {
  std::string line = text.substr(0, text.find('\n'));
  if (line.size() > cap) line = line.substr(0, cap) + "…";
  return line;
}

template <class T>
T field(const Json& event, const char* key, T fallback) {
  auto it = event.find(key);
  if (it == event.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const Json::exception&) {
    return fallback;
  }
}

// A trajectory is the kernel's own log of a long run: far above the manifest cap, still bounded.
constexpr std::size_t kMaxTrajectoryBytes = std::size_t{1} << 30;

Result<std::vector<Json>> read_events(const fs::path& path) {
  KERNEX_ASSIGN_OR_RETURN(auto text, read_regular_file(path, "trajectory", kMaxTrajectoryBytes));
  std::vector<Json> events;
  std::istringstream in(std::move(text));
  for (std::string line; std::getline(in, line);) {
    Json j = parse_untrusted(line);
    if (j.is_object()) events.push_back(std::move(j));
  }
  return events;
}

TrajectorySummary summarize(std::string run_id, const fs::path& path,
                            const std::vector<Json>& events) {
  TrajectorySummary s;
  s.run_id = std::move(run_id);
  s.path = path;
  s.events = events.size();
  for (const auto& e : events) {
    const std::string type = field<std::string>(e, "type", "");
    if (type == "run_start") {
      s.kind = field<std::string>(e, "kind", "run");
      s.question = first_line(field<std::string>(e, "question", ""), 80);
      s.started_ms = field<std::int64_t>(e, "ts_ms", 0);
    } else if (type == "run_end") {
      s.outcome = field<std::string>(e, "outcome", "");
      s.error = field<std::string>(e, "error", "");
      s.input_tokens =
          field<std::uint64_t>(e, "tree_input_tokens", field<std::uint64_t>(e, "input_tokens", 0));
      s.output_tokens = field<std::uint64_t>(e, "tree_output_tokens",
                                             field<std::uint64_t>(e, "output_tokens", 0));
      s.cost_usd = field<double>(e, "tree_cost_usd", field<double>(e, "cost_usd", 0.0));
    }
  }
  return s;
}

std::string indent(const std::string& text, const std::string& pad) {
  std::string out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out += pad + line + "\n";
  return out;
}

}  // namespace

Result<std::vector<TrajectorySummary>> list_trajectories(const fs::path& dir) {
  bool any = false;
  KERNEX_ASSIGN_OR_RETURN(auto places, detail::find_runs(dir, "", any));
  // Each segment read once, whatever the number of its runs.
  std::map<fs::path, std::map<std::string, std::vector<Json>>> segments;
  std::map<fs::path, std::string> unreadable;
  std::vector<TrajectorySummary> out;
  for (const auto& [id, place] : places) {
    if (!place.file.empty()) {
      auto events = read_events(place.file);
      if (events) {
        out.push_back(summarize(id, place.file, *events));
      } else {
        TrajectorySummary s;
        s.run_id = id;
        s.path = place.file;
        s.error = events.error().describe();
        out.push_back(std::move(s));
      }
      continue;
    }
    std::vector<Json> events;
    for (const auto& path : place.segments) {
      auto [it, fresh] = segments.try_emplace(path);
      if (fresh) {
        auto read = detail::read_segment(path);
        if (read) {
          it->second = std::move(*read);
        } else {
          unreadable[path] = read.error().describe();
        }
      }
      if (auto run = it->second.find(id); run != it->second.end())
        events.insert(events.end(), run->second.begin(), run->second.end());
    }
    TrajectorySummary s = summarize(id, place.segments.front(), events);
    if (events.empty() && unreadable.contains(place.segments.front()))
      s.error = unreadable[place.segments.front()];
    out.push_back(std::move(s));
  }
  // Run ids start with their UTC start time: by id, wherever the folder or segment.
  return out;
}

Result<std::vector<Json>> read_trajectory(const fs::path& dir, const std::string& run) {
  bool any = false;
  // "last" needs every id; an id or a prefix of one only its day's index.
  const bool last = run == "last";
  KERNEX_ASSIGN_OR_RETURN(auto places, detail::find_runs(dir, last ? "" : run, any, last));
  if (!any) return fail(ErrorCode::Usage, "no trajectories in " + dir.string());
  auto read = [&](const std::string& id, const detail::RunPlace& place) {
    return place.file.empty() ? detail::read_segment_run(place.segments, id)
                              : read_events(place.file);
  };
  if (last) {
    if (places.empty()) return fail(ErrorCode::Usage, "no trajectories in " + dir.string());
    return read(places.rbegin()->first, places.rbegin()->second);
  }
  if (auto exact = places.find(run); exact != places.end())
    return read(exact->first, exact->second);
  if (places.size() == 1) return read(places.begin()->first, places.begin()->second);
  if (places.empty()) return fail(ErrorCode::Usage, "no run '" + run + "' in " + dir.string());
  return fail(ErrorCode::Usage, "'" + run + "' matches " + std::to_string(places.size()) +
                                    " runs; give more of the id");
}

Json to_json(const TrajectorySummary& s) {
  return Json{{"run_id", s.run_id},
              {"path", s.path.string()},
              {"kind", s.kind},
              {"question", s.question},
              {"outcome", s.outcome},
              {"error", s.error},
              {"input_tokens", s.input_tokens},
              {"output_tokens", s.output_tokens},
              {"cost_usd", s.cost_usd},
              {"events", s.events},
              {"started_ms", s.started_ms}};
}

std::string render_trajectory_text(const std::vector<Json>& events) {
  std::ostringstream out;
  for (const auto& e : events) {
    const std::string type = field<std::string>(e, "type", "?");
    const std::string span = field<std::string>(e, "span", "");
    const std::string pad(2 * field<std::size_t>(e, "depth", 0), ' ');
    out << pad << "[" << field<std::uint64_t>(e, "seq", 0) << "] " << type;
    if (!span.empty()) out << " " << span;
    if (type == "run_start") {
      out << " " << field<std::string>(e, "kind", "") << " "
          << field<std::string>(e, "provider", "") << "/" << field<std::string>(e, "model", "")
          << "\n"
          << indent(field<std::string>(e, "question", ""), pad + "  > ");
    } else if (type == "provider_call") {
      out << " " << field<std::string>(e, "model", "")
          << " in=" << field<std::uint64_t>(e, "input_tokens", 0)
          << " out=" << field<std::uint64_t>(e, "output_tokens", 0) << " $"
          << field<double>(e, "cost_usd", 0) << " " << field<double>(e, "latency_ms", 0) << " ms\n";
      if (e.contains("error")) out << indent(field<std::string>(e, "error", ""), pad + "  ! ");
    } else if (type == "tool_call") {
      out << " " << field<std::string>(e, "name", "")
          << (field<bool>(e, "is_error", false) ? " (error)" : "");
      if (e.contains("code_run")) out << " from code " << field<std::string>(e, "code_run", "?");
      out << " " << field<double>(e, "duration_ms", 0) << " ms\n"
          << indent(e.value("arguments", Json::object()).dump(), pad + "  < ")
          << indent(first_line(field<std::string>(e, "result", ""), 400), pad + "  > ");
    } else if (type == "code_run") {
      if (e.contains("id")) out << " " << field<std::string>(e, "id", "");
      out << " " << field<double>(e, "wall_ms", 0) << " ms\n"
          << indent(field<std::string>(e, "code", ""), pad + "  | ")
          << indent(field<std::string>(e, "stdout", ""), pad + "  > ");
    } else if (type == "sub_call") {
      out << " " << field<std::string>(e, "kind", "")
          << " depth=" << field<std::uint32_t>(e, "depth", 0) << "\n"
          << indent(first_line(field<std::string>(e, "prompt", ""), 200), pad + "  < ")
          << indent(first_line(field<std::string>(e, "answer", field<std::string>(e, "error", "")),
                               200),
                    pad + "  > ");
    } else if (type == "result") {
      out << " from " << field<std::string>(e, "code_run", "?") << "\n"
          << indent(first_line(e.value("value", Json(nullptr))
                                   .dump(-1, ' ', false, Json::error_handler_t::replace),
                               400),
                    pad + "  = ");
    } else if (type == "run_end") {
      out << " " << field<std::string>(e, "outcome", field<std::string>(e, "error", "")) << " $"
          << field<double>(e, "tree_cost_usd", field<double>(e, "cost_usd", 0)) << "\n"
          << indent(field<std::string>(e, "text", ""), pad + "  = ");
    } else {
      out << "\n";
    }
  }
  return out.str();
}

}  // namespace kernex
