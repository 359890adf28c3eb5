#include "kernex/pricing.hpp"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <regex>

#include "kernex/files.hpp"

namespace kernex {

double ModelPricing::cost(const Usage& usage) const {
  // Each kind of token at its own rate (kernex billed everything at the blended rate).
  const double micro_usd = input_per_mtok * static_cast<double>(usage.input_tokens) +
                           output_per_mtok * static_cast<double>(usage.output_tokens) +
                           cache_read_per_mtok * static_cast<double>(usage.cache_read_tokens) +
                           cache_write_per_mtok * static_cast<double>(usage.cache_write_tokens);
  return micro_usd / 1e6;
}

namespace {

// Model ids are short; longer input is not a model id, and libstdc++'s backtracking regex
// recurses per character, so user-written patterns never see unbounded input.
constexpr std::size_t kMaxRegexSubject = 1024;

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::regex compile(const std::string& pattern) {
  return std::regex(pattern, std::regex::ECMAScript | std::regex::icase);
}

// Patterns were validated at load; each is compiled once per process. A compiled regex is only
// read by regex_search, so threads share it. (A cache per thread compiled them on every thread's
// first cost: the data file's two icase patterns take ~0.6 ms, their bracket tables built through
// the locale, and a burst of 1 000 streams on `kernex serve` makes ~80 run threads.) Never
// destroyed: a thread still pricing while the process exits finds it whole.
const std::regex& cached_regex(const std::string& pattern) {
  using Cache = std::map<std::string, std::unique_ptr<const std::regex>, std::less<>>;
  static auto* const mutex = new std::mutex;
  static auto* const cache = new Cache;
  std::lock_guard lock(*mutex);
  auto it = cache->find(pattern);
  if (it == cache->end())
    it = cache->emplace(pattern, std::make_unique<const std::regex>(compile(pattern))).first;
  return *it->second;  // never erased: the reference outlives the lock
}

bool rule_matches(const PricingTable::Rule& rule, const std::string& model) {
  using Match = PricingTable::Rule::Match;
  for (const std::string& p : rule.patterns) {
    switch (rule.match) {
      case Match::Contains:
        if (model.find(p) != std::string::npos) return true;
        break;
      case Match::Equals:
        if (model == p) return true;
        break;
      case Match::StartsWith:
        if (model.starts_with(p)) return true;
        break;
      case Match::Regex:
        if (model.size() <= kMaxRegexSubject && std::regex_search(model, cached_regex(p)))
          return true;
        break;
    }
  }
  return false;
}

std::string where(std::string_view origin, const YAML::Mark& mark) {
  std::string out(origin);
  if (!mark.is_null() && mark.line >= 0) out += ":" + std::to_string(mark.line + 1);
  return out;
}

struct RuleParser {
  std::string_view origin;
  std::size_t index;  // 1-based, as a person counts the rules in the file

  std::unexpected<Error> error(const YAML::Node& at, const std::string& field,
                               const std::string& what) const {
    std::string msg = where(origin, at.Mark()) + ": pricing rule " + std::to_string(index);
    if (!field.empty()) msg += ", field '" + field + "'";
    return fail(ErrorCode::Config, msg + ": " + what);
  }

  Result<double> price(const YAML::Node& node, const std::string& field) const {
    double value = 0;
    if (!node.IsScalar() || !YAML::convert<double>::decode(node, value) || !std::isfinite(value) ||
        value < 0) {
      return error(node, field, "expected a non-negative number of USD per million tokens");
    }
    return value;
  }

  Result<PricingTable::Rule> parse(const YAML::Node& node) const {
    using Match = PricingTable::Rule::Match;
    if (!node.IsMap())
      return error(node, "", "expected a mapping with match, patterns, input and output");
    PricingTable::Rule rule;
    bool has_match = false, has_patterns = false, has_input = false, has_output = false;
    std::optional<double> cache_read, cache_write;
    for (const auto& kv : node) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : std::string();
      const YAML::Node& value = kv.second;
      if (key == "match") {
        const std::string kind = value.IsScalar() ? value.Scalar() : std::string();
        if (kind == "contains")
          rule.match = Match::Contains;
        else if (kind == "equals")
          rule.match = Match::Equals;
        else if (kind == "starts_with")
          rule.match = Match::StartsWith;
        else if (kind == "regex")
          rule.match = Match::Regex;
        else
          return error(value, key, "expected one of contains, equals, starts_with, regex");
        has_match = true;
      } else if (key == "patterns") {
        if (!value.IsSequence() || value.size() == 0)
          return error(value, key, "expected a non-empty list of strings");
        for (const YAML::Node& item : value) {
          if (!item.IsScalar() || item.Scalar().empty())
            return error(item, key, "expected a non-empty string");
          rule.patterns.push_back(item.Scalar());
        }
        has_patterns = true;
      } else if (key == "input" || key == "output" || key == "cache_read" || key == "cache_write") {
        KERNEX_ASSIGN_OR_RETURN(auto v, price(value, key));
        if (key == "input") {
          rule.price.input_per_mtok = v;
          has_input = true;
        } else if (key == "output") {
          rule.price.output_per_mtok = v;
          has_output = true;
        } else if (key == "cache_read") {
          cache_read = v;
        } else {
          cache_write = v;
        }
      } else {
        return error(
            kv.first, key,
            "unknown field (expected match, patterns, input, output, cache_read, cache_write)");
      }
    }
    if (!has_match) return error(node, "match", "missing (contains, equals, starts_with or regex)");
    if (!has_patterns) return error(node, "patterns", "missing");
    if (!has_input) return error(node, "input", "missing");
    if (!has_output) return error(node, "output", "missing");
    // Anthropic's cache rates relative to input; files give explicit rates for other vendors.
    rule.price.cache_read_per_mtok = cache_read.value_or(rule.price.input_per_mtok * 0.10);
    rule.price.cache_write_per_mtok = cache_write.value_or(rule.price.input_per_mtok * 1.25);
    if (rule.match == Match::Regex) {
      for (const std::string& p : rule.patterns) {
        try {
          (void)cached_regex(p);  // compiled once: the check is the first use's compile
        } catch (const std::regex_error& e) {
          return error(node["patterns"], "patterns", "invalid regex '" + p + "': " + e.what());
        }
      }
    } else {
      for (std::string& p : rule.patterns) p = ascii_lower(p);  // ids are matched lower-cased
    }
    return rule;
  }
};

}  // namespace

Result<PricingTable> PricingTable::parse_yaml(std::string_view text, std::string_view origin) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return fail(ErrorCode::Config,
                where(origin, e.mark) + ": invalid YAML in pricing file: " + e.msg);
  }
  if (!root.IsSequence()) {
    return fail(ErrorCode::Config,
                where(origin, root.Mark()) +
                    ": pricing file must be a list of rules (- match: ..., patterns: [...], "
                    "input: N, output: N)");
  }
  PricingTable table;
  try {
    for (std::size_t i = 0; i < root.size(); ++i) {
      KERNEX_ASSIGN_OR_RETURN(auto rule, RuleParser{origin, i + 1}.parse(root[i]));
      table.rules_.push_back(std::move(rule));
    }
  } catch (const YAML::Exception& e) {
    return fail(ErrorCode::Config, where(origin, e.mark) + ": " + e.msg);
  }
  return table;
}

Result<PricingTable> PricingTable::load_yaml_file(const std::filesystem::path& path) {
  KERNEX_ASSIGN_OR_RETURN(auto text, read_regular_file(path, "pricing file", kMaxScriptFileBytes));
  return parse_yaml(text, path.string());
}

std::optional<ModelPricing> PricingTable::pricing_for(std::string_view model) const {
  const std::string id = ascii_lower(model);
  for (const Rule& rule : rules_) {
    if (rule_matches(rule, id)) return rule.price;
  }
  return std::nullopt;
}

double PricingTable::cost(std::string_view model, const Usage& usage) const {
  const auto price = pricing_for(model);
  return price ? price->cost(usage) : 0.0;
}

}  // namespace kernex
