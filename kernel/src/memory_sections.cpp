// The parts of the system prompt that come from memory, in kernex's wording, so prompts
// written for kernex keep working.
#include <algorithm>
#include <array>
#include <ctime>
#include <string_view>

#include "context_builder.hpp"
#include "kernex/permissions.hpp"

namespace kernex {
namespace {

// Facts the assistant keeps for itself; never shown as part of the user's profile.
constexpr std::array<std::string_view, 5> kSystemFactKeys{
    "welcomed", "preferred_language", "active_project", "personality", "onboarding_stage"};
constexpr std::array<std::string_view, 3> kIdentityKeys{"name", "preferred_name", "pronouns"};
constexpr std::array<std::string_view, 3> kContextKeys{"timezone", "location", "occupation"};
constexpr std::size_t kRecallPreviewBytes = 200;

template <std::size_t N>
bool in(const std::array<std::string_view, N>& set, std::string_view key) {
  return std::find(set.begin(), set.end(), key) != set.end();
}

std::optional<std::time_t> parse_utc(const std::string& text) {
  std::tm tm{};
  if (text.size() < 19 ||
      std::sscanf(text.c_str(), "%4d-%2d-%2d %2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6) {
    return std::nullopt;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return timegm(&tm);
}

std::string age(const std::string& then, const std::string& now) {
  auto a = parse_utc(then), b = parse_utc(now);
  if (!a || !b) return then;
  const long minutes = std::max<long>(0, static_cast<long>(*b - *a) / 60);
  if (minutes < 60) return std::to_string(minutes) + "m ago";
  if (minutes < 1440) return std::to_string(minutes / 60) + "h ago";
  return std::to_string(minutes / 1440) + "d ago";
}

}  // namespace

std::string profile_section(const std::vector<std::pair<std::string, std::string>>& facts) {
  std::vector<const std::pair<std::string, std::string>*> identity, context, rest;
  for (const auto& f : facts) {
    if (in(kSystemFactKeys, f.first)) continue;
    (in(kIdentityKeys, f.first)  ? identity
     : in(kContextKeys, f.first) ? context
                                 : rest)
        .push_back(&f);
  }
  const auto by = [](const auto& order) {
    return [&order](const auto* a, const auto* b) {
      return std::find(order.begin(), order.end(), a->first) <
             std::find(order.begin(), order.end(), b->first);
    };
  };
  std::stable_sort(identity.begin(), identity.end(), by(kIdentityKeys));
  std::stable_sort(context.begin(), context.end(), by(kContextKeys));
  std::string out;
  for (const auto* group : {&identity, &context, &rest}) {
    for (const auto* f : *group) out += "\n- " + f->first + ": " + f->second;
  }
  return out.empty() ? out : "User profile:" + out;
}

std::string lessons_section(const std::vector<Lesson>& lessons) {
  std::string out;
  for (const auto& l : lessons) {
    out += "\n- [" + l.domain + "] " + (l.project.empty() ? "" : "(" + l.project + ") ") + l.rule;
  }
  return out.empty() ? out : "Learned behavioral rules:" + out;
}

std::string summaries_section(const std::vector<SummaryRecord>& summaries) {
  std::string out;
  for (const auto& s : summaries) out += "\n- [" + s.updated_at + "] " + s.text;
  return out.empty() ? out : "Recent conversation history:" + out;
}

std::string recall_section(const std::vector<RecallHit>& hits) {
  std::string out;
  for (const auto& h : hits) {
    std::string_view text = h.text;
    std::string preview(text.substr(0, floor_char_boundary(text, kRecallPreviewBytes)));
    if (preview.size() < text.size()) preview += "...";
    out +=
        "\n- [" + h.created_at + "] " + (h.source == "summary" ? "Summary: " : "User: ") + preview;
  }
  return out.empty() ? out : "Related past context:" + out;
}

std::string tasks_section(const std::vector<Task>& tasks) {
  std::string out;
  for (const auto& t : tasks) {
    out += "\n- [" + t.id.substr(0, 8) + "] " + t.spec.description;
    if (t.spec.task_type == "action") out += " [action]";
    if (!t.spec.project.empty()) out += " (" + t.spec.project + ")";
    out += " (due: " + t.spec.due_at + ", " + t.spec.repeat.value_or("once") + ")";
  }
  return out.empty() ? out : "User's scheduled tasks:" + out;
}

std::string outcomes_section(const std::vector<OutcomeRecord>& outcomes, const std::string& now) {
  std::string out;
  for (const auto& o : outcomes) {
    const char* sign = o.score > 0 ? "+" : o.score < 0 ? "-" : "~";
    out += std::string("\n- [") + sign + "] " + o.domain + ": " + o.lesson + " (" +
           age(o.timestamp, now) + ")";
  }
  return out.empty() ? out : "Recent outcomes:" + out;
}

}  // namespace kernex
