#include "suggest.hpp"

#include <algorithm>
#include <vector>

namespace kernex::cli {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Three rows of the dynamic-programming table: the swap looks two rows back.
  std::vector<std::size_t> before(b.size() + 1), prev(b.size() + 1), row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      row[j] = std::min({prev[j] + 1, row[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        row[j] = std::min(row[j], before[j - 2] + 1);
    }
    std::swap(before, prev);
    std::swap(prev, row);
  }
  return prev[b.size()];
}

std::optional<std::string> nearest(std::string_view typed, std::span<const std::string> names) {
  // A beginning of one name alone (`/hist`, `mem`) means that name.
  const auto starts = [&](const std::string& n) {
    return n.size() > typed.size() && n.starts_with(typed);
  };
  if (typed.size() >= 2 && std::count_if(names.begin(), names.end(), starts) == 1)
    return *std::find_if(names.begin(), names.end(), starts);
  const std::size_t allowed = typed.size() <= 4 ? 1 : 2;
  std::optional<std::string> best;
  std::size_t best_distance = allowed + 1;
  for (const std::string& name : names) {
    const std::size_t d = edit_distance(typed, name);
    if (d < best_distance && d < name.size()) {
      best = name;
      best_distance = d;
    }
  }
  return best;
}

namespace {

// The option of `command` (or of a command above it) that `token` names (`--config`,
// `--config=k.yaml`).
std::optional<Option> option_named(Command command, const std::string& token) {
  const std::string name = token.substr(0, token.find('='));
  for (std::optional<Command> c = command; c; c = c->parent()) {
    if (auto opt = c->option(name)) return opt;
  }
  return std::nullopt;
}

// Whether `token` is an option that takes a value in the next argument, as `--config k.yaml` does.
bool takes_next_value(Command command, const std::string& token) {
  if (token.find('=') != std::string::npos) return false;
  const auto opt = option_named(command, token);
  return opt && opt->takes_value();
}

std::vector<std::string> subcommand_names(Command command) {
  std::vector<std::string> names;
  for (const Command& s : command.subcommands()) names.push_back(s.name());
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  std::string all;
  for (const std::string& n : names) all.append(" ").append(n);
  return all;
}

}  // namespace

std::optional<std::string> unknown_subcommand_hint(Command root, int argc,
                                                   const char* const* argv) {
  Command at = root;
  std::optional<std::string> unknown_option;
  for (int i = 1; i < argc; ++i) {
    const std::string token = argv[i];
    if (token == "--") return std::nullopt;
    if (token.starts_with("-")) {
      if (!unknown_option && !option_named(at, token)) unknown_option = token;
      if (takes_next_value(at, token)) ++i;
      continue;
    }
    const auto subs = at.subcommands();
    if (subs.empty()) return std::nullopt;  // a positional argument, not a command
    const auto named =
        std::find_if(subs.begin(), subs.end(), [&](const Command& s) { return s.named(token); });
    if (named != subs.end()) {
      at = *named;
      continue;
    }
    if (at.has_positionals()) return std::nullopt;  // a word the command takes as its argument
    const auto names = subcommand_names(at);
    std::string hint = "unknown command '" + token + "'";
    if (auto guess = nearest(token, names)) return hint + "; did you mean '" + *guess + "'?";
    return hint + "; the commands are:" + joined(names);
  }
  // The words ran out where a command was required (`kernex serve keys`): name the choices.
  if (!at.requires_subcommand()) return std::nullopt;
  if (unknown_option) return "unknown option '" + *unknown_option + "'";  // CLI11 says "required"
  std::string where;
  for (std::optional<Command> c = at; c->parent(); c = c->parent())
    where.insert(0, " " + c->name());
  return "missing command after 'kernex" + where +
         "'; the commands are:" + joined(subcommand_names(at));
}

}  // namespace kernex::cli
