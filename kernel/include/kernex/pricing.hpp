// Model prices come from a YAML data file (data/pricing.yaml), not from code.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/error.hpp"
#include "kernex/message.hpp"

namespace kernex {

// USD per million tokens.
struct ModelPricing {
  double input_per_mtok = 0;
  double output_per_mtok = 0;
  double cache_read_per_mtok = 0;   // defaults to 10% of input when the file gives none
  double cache_write_per_mtok = 0;  // defaults to 125% of input when the file gives none

  double blended_per_mtok() const { return (input_per_mtok + output_per_mtok) / 2.0; }
  // kernex's estimate: every token at the blended rate.
  double estimate_cost(std::uint64_t tokens) const {
    return blended_per_mtok() * static_cast<double>(tokens) / 1e6;
  }
  // Each kind of token at its own rate.
  double cost(const Usage& usage) const;
};

class PricingTable {
 public:
  struct Rule {
    enum class Match { Contains, Equals, StartsWith, Regex };
    Match match = Match::Contains;
    std::vector<std::string> patterns;  // any pattern matching selects the rule
    ModelPricing price;
  };

  static Result<PricingTable> load_yaml_file(const std::filesystem::path& path);
  static Result<PricingTable> parse_yaml(std::string_view text, std::string_view origin);

  // First rule matching the lower-cased model id, or nullopt (cost 0).
  std::optional<ModelPricing> pricing_for(std::string_view model) const;
  // Cost of `usage` on `model`; 0 for unknown models.
  double cost(std::string_view model, const Usage& usage) const;

  const std::vector<Rule>& rules() const { return rules_; }

 private:
  std::vector<Rule> rules_;
};

}  // namespace kernex
