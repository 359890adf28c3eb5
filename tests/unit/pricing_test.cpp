// Pricing: kernex's 16 pricing.rs cases against the real data/pricing.yaml, the gaps and the
// cache-billing defect this port fixes, and the data file's error messages.
#include "kernex/pricing.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <thread>
#include <vector>

namespace kernex {
namespace {

using ::testing::HasSubstr;

const PricingTable& table() {
  static const PricingTable t = [] {
    auto loaded = PricingTable::load_yaml_file(KERNEX_SOURCE_DIR "/data/pricing.yaml");
    if (!loaded) throw std::runtime_error(loaded.error().describe());
    return *loaded;
  }();
  return t;
}

::testing::AssertionResult priced(const std::string& model, double in, double out) {
  const auto p = table().pricing_for(model);
  if (!p) return ::testing::AssertionFailure() << model << " has no price";
  if (p->input_per_mtok != in || p->output_per_mtok != out) {
    return ::testing::AssertionFailure() << model << " priced " << p->input_per_mtok << "/"
                                         << p->output_per_mtok << ", expected " << in << "/" << out;
  }
  return ::testing::AssertionSuccess();
}

// kernex's Opus-4 minor-version parse lives in the file's regex rules: a table of just those
// rules prices exactly the ids whose minor version kernex would have parsed.
std::optional<ModelPricing> minor_rule_price(const std::string& model) {
  std::ostringstream yaml;
  for (const auto& rule : table().rules()) {
    if (rule.match != PricingTable::Rule::Match::Regex) continue;
    yaml << "- match: regex\n  patterns:\n";
    for (const auto& p : rule.patterns) yaml << "    - '" << p << "'\n";
    yaml << "  input: " << rule.price.input_per_mtok << "\n  output: " << rule.price.output_per_mtok
         << "\n";
  }
  auto sub = PricingTable::parse_yaml(yaml.str(), "regex-rules");
  if (!sub) throw std::runtime_error(sub.error().describe());
  return sub->pricing_for(model);
}

// --- kernex pricing.rs conformance (16) ---

TEST(Pricing, SonnetCurrent) { EXPECT_TRUE(priced("claude-sonnet-4-6", 3, 15)); }

TEST(Pricing, OpusFourFiveAndLaterAreCheaper) {
  for (const char* m :
       {"claude-opus-4-5", "claude-opus-4-6", "claude-opus-4-7", "claude-opus-4-8"}) {
    EXPECT_TRUE(priced(m, 5, 25));
  }
}

TEST(Pricing, OlderOpusKeepsLegacyPrice) {
  for (const char* m : {"claude-opus-4-0", "claude-opus-4-1", "claude-opus-3"})
    EXPECT_TRUE(priced(m, 15, 75));
}

TEST(Pricing, FutureOpusMinorsUseNewPrice) {
  EXPECT_TRUE(priced("claude-opus-4-9", 5, 25));
  EXPECT_TRUE(priced("claude-opus-4-10", 5, 25));
}

TEST(Pricing, DateSuffixedOpusIsLegacy) { EXPECT_TRUE(priced("claude-opus-4-20250514", 15, 75)); }

TEST(Pricing, HaikuFourSix) { EXPECT_TRUE(priced("claude-haiku-4-6", 1, 5)); }

TEST(Pricing, OpusMinorParse) {
  EXPECT_EQ(minor_rule_price("claude-opus-4-5")->input_per_mtok, 5);    // minor 5
  EXPECT_EQ(minor_rule_price("claude-opus-4-10")->input_per_mtok, 5);   // minor 10
  EXPECT_EQ(minor_rule_price("claude-opus-4-1")->input_per_mtok, 15);   // minor 1
  EXPECT_EQ(minor_rule_price("claude-opus-4-05")->input_per_mtok, 5);   // two digits, value 5
  EXPECT_EQ(minor_rule_price("claude-opus-4-04")->input_per_mtok, 15);  // two digits, value 4
  EXPECT_EQ(minor_rule_price("claude-opus-4-5-20251101")->input_per_mtok, 5);
  EXPECT_FALSE(minor_rule_price("claude-opus-4-20250514"));  // a date, not a minor
  EXPECT_FALSE(minor_rule_price("claude-opus-4-100"));       // three digits
  EXPECT_FALSE(minor_rule_price("claude-opus-4"));
  EXPECT_FALSE(minor_rule_price("claude-opus-3"));
}

TEST(Pricing, HaikuFourFive) { EXPECT_TRUE(priced("claude-haiku-4-5", 1, 5)); }

TEST(Pricing, ClaudeThreeFiveHaiku) { EXPECT_TRUE(priced("claude-3-5-haiku", 0.25, 1.25)); }

TEST(Pricing, Fable) { EXPECT_TRUE(priced("claude-fable-5", 10, 50)); }

TEST(Pricing, Gpt4oMini) { EXPECT_EQ(table().pricing_for("gpt-4o-mini")->input_per_mtok, 0.15); }

TEST(Pricing, Gpt4o) { EXPECT_EQ(table().pricing_for("gpt-4o")->input_per_mtok, 2.5); }

TEST(Pricing, UnknownModelsHaveNoPrice) {
  EXPECT_FALSE(table().pricing_for("llama3.2"));
  EXPECT_FALSE(table().pricing_for("mistral-7b"));
  EXPECT_EQ(table().cost("llama3.2", Usage{1000, 1000, 0, 0, 0}), 0.0);
}

TEST(Pricing, ModelIdsAreCaseInsensitive) {
  EXPECT_TRUE(table().pricing_for("Claude-Sonnet-4-6"));
  EXPECT_TRUE(table().pricing_for("GPT-4O"));
}

TEST(Pricing, EstimateCostUsesBlendedRate) {
  const ModelPricing p{3, 15, 0.3, 3.75};
  EXPECT_NEAR(p.estimate_cost(1000), 0.009, 1e-9);
}

TEST(Pricing, BlendedRate) { EXPECT_EQ((ModelPricing{3, 15, 0, 0}).blended_per_mtok(), 9.0); }

// --- the rest of kernex's table, in its order ---

TEST(Pricing, KernexOpenAiAndGeminiRules) {
  EXPECT_TRUE(priced("o1", 15, 60));
  EXPECT_TRUE(priced("o1-preview", 15, 60));
  EXPECT_TRUE(priced("o1 pro", 15, 60));
  EXPECT_TRUE(priced("o1-mini", 3, 12));
  EXPECT_FALSE(table().pricing_for("o1x"));
  EXPECT_FALSE(table().pricing_for("pro1"));
  EXPECT_TRUE(priced("o3", 10, 40));
  EXPECT_TRUE(priced("o3-2025-04-16", 10, 40));
  EXPECT_TRUE(priced("o3-mini", 1.1, 4.4));
  EXPECT_TRUE(priced("gpt-4-turbo", 10, 30));
  EXPECT_TRUE(priced("gpt-4-1106-preview", 10, 30));
  EXPECT_TRUE(priced("gpt-4", 30, 60));
  EXPECT_TRUE(priced("gpt-4-0613", 30, 60));
  EXPECT_TRUE(priced("gpt-3.5-turbo", 0.5, 1.5));
  EXPECT_TRUE(priced("gemini-2.0-flash", 0.1, 0.4));
  EXPECT_TRUE(priced("gemini-2-flash", 0.1, 0.4));
  EXPECT_TRUE(priced("gemini-1.5-pro", 1.25, 5));
  EXPECT_TRUE(priced("gemini-1.5-flash", 0.075, 0.3));
  EXPECT_TRUE(priced("claude-sonnet-3-7", 3, 15));
  EXPECT_TRUE(priced("claude-3-5-sonnet-20241022", 3, 15));
  EXPECT_TRUE(priced("claude-3-haiku-20240307", 0.25, 1.25));
  EXPECT_TRUE(priced("claude-mythos", 10, 50));
}

TEST(Pricing, PrefixQualifiedIdsMatchBySubstring) {
  EXPECT_TRUE(priced("anthropic/claude-opus-4-8", 5, 25));
  EXPECT_TRUE(priced("us.anthropic.claude-sonnet-4-6", 3, 15));
  EXPECT_TRUE(priced("openai/gpt-4.1", 2, 8));
}

// --- kernex defects this port fixes ---

TEST(Pricing, DefectGpt41NotPricedAsGpt4) {
  EXPECT_TRUE(priced("gpt-4.1", 2, 8));
  EXPECT_TRUE(priced("gpt-4.1-2025-04-14", 2, 8));
  EXPECT_TRUE(priced("gpt-4.1-mini", 0.4, 1.6));
  EXPECT_TRUE(priced("gpt-4.1-nano", 0.1, 0.4));
}

TEST(Pricing, DefectUnpricedFlagshipModels) {
  EXPECT_TRUE(priced("claude-3-opus-20240229", 15, 75));
  EXPECT_TRUE(priced("claude-3-7-sonnet-20250219", 3, 15));
  EXPECT_TRUE(priced("gemini-2.5-pro", 1.25, 10));
  EXPECT_TRUE(priced("gemini-2.5-flash", 0.30, 2.50));
  EXPECT_TRUE(priced("gemini-2.5-flash-lite", 0.1, 0.4));
  EXPECT_TRUE(priced("o4-mini", 1.1, 4.4));
  EXPECT_TRUE(priced("gpt-5", 1.25, 10));
  EXPECT_TRUE(priced("gpt-5-mini", 0.25, 2));
  EXPECT_TRUE(priced("gpt-5-nano", 0.05, 0.40));
}

TEST(Pricing, DefectCacheReadsBilledAtBlendedRate) {
  // A long cached prompt: kernex billed all 1,002,000 tokens at the blended $9/Mtok.
  const Usage usage{1000, 1000, 1'000'000, 0, 0};
  const auto p = table().pricing_for("claude-sonnet-4-6");
  ASSERT_TRUE(p);
  EXPECT_NEAR(p->cache_read_per_mtok, 0.3, 1e-12);    // 10% of input
  EXPECT_NEAR(p->cache_write_per_mtok, 3.75, 1e-12);  // 125% of input
  const double expected = (1000 * 3.0 + 1000 * 15.0 + 1'000'000 * 0.3) / 1e6;
  EXPECT_NEAR(p->cost(usage), expected, 1e-12);
  EXPECT_NEAR(table().cost("claude-sonnet-4-6", usage), expected, 1e-12);
  EXPECT_LT(p->cost(usage), p->estimate_cost(usage.total_tokens()) / 10);
}

TEST(Pricing, CacheWritesAndExplicitVendorCacheRates) {
  const Usage writes{0, 0, 0, 1'000'000, 0};
  EXPECT_NEAR(table().cost("claude-opus-4-8", writes), 6.25, 1e-12);
  const Usage reads{0, 0, 1'000'000, 0, 0};
  EXPECT_NEAR(table().cost("gpt-4o", reads), 1.25, 1e-12);  // OpenAI: half price
  EXPECT_NEAR(table().cost("gpt-5", reads), 0.125, 1e-12);  // OpenAI gpt-5: a tenth
  EXPECT_NEAR(table().cost("gpt-4o", writes), 2.5, 1e-12);  // no premium for writes
}

// --- the data file ---

TEST(Pricing, DataFileKeepsKernexOrderAndAddsAfter) {
  const auto& rules = table().rules();
  ASSERT_GE(rules.size(), 20u);
  EXPECT_EQ(rules.front().patterns, (std::vector<std::string>{"claude-fable-5", "claude-mythos"}));
  std::size_t gpt41 = 0, gpt4 = 0;
  for (std::size_t i = 0; i < rules.size(); ++i) {
    EXPECT_FALSE(rules[i].patterns.empty());
    if (rules[i].patterns == std::vector<std::string>{"gpt-4.1"}) gpt41 = i;
    if (rules[i].patterns == std::vector<std::string>{"gpt-4"}) gpt4 = i;
  }
  EXPECT_LT(gpt41, gpt4);
}

TEST(Pricing, PatternsMatchCaseInsensitively) {
  const auto t = PricingTable::parse_yaml(
      "- {match: equals, patterns: [My-Model], input: 1, output: 2}\n", "p.yaml");
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_TRUE(t->pricing_for("my-model"));
  EXPECT_TRUE(t->pricing_for("MY-MODEL"));
  EXPECT_NEAR(t->pricing_for("my-model")->cache_read_per_mtok, 0.1, 1e-12);
}

TEST(Pricing, HugeModelIdDoesNotCrash) {
  const std::string id(200'000, 'a');
  EXPECT_FALSE(table().pricing_for(id));
  EXPECT_TRUE(table().pricing_for(id + "claude-opus-4-5"));
}

TEST(Pricing, MissingFileIsAnIoError) {
  const auto t = PricingTable::load_yaml_file("/nonexistent/pricing.yaml");
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code, ErrorCode::Io);
  EXPECT_THAT(t.error().message, HasSubstr("/nonexistent/pricing.yaml"));
}

struct ErrorCase {
  const char* text;
  std::vector<std::string> expected;
};

TEST(Pricing, YamlErrorsNameFileRuleAndField) {
  const std::vector<ErrorCase> cases = {
      {"match: contains\n", {"p.yaml:1", "list of rules"}},
      {"- match: contains\n  patterns: [a]\n  input: 1\n  output: 2\n- match: fuzzy\n  patterns: "
       "[b]\n  input: 1\n  "
       "output: 2\n",
       {"p.yaml:5", "rule 2", "field 'match'", "contains, equals, starts_with, regex"}},
      {"- match: contains\n  patterns: [a]\n  output: 2\n",
       {"p.yaml:1", "rule 1", "field 'input'", "missing"}},
      {"- match: contains\n  patterns: [a]\n  input: cheap\n  output: 2\n",
       {"p.yaml:3", "rule 1", "field 'input'", "non-negative number"}},
      {"- match: contains\n  patterns: [a]\n  input: -1\n  output: 2\n",
       {"p.yaml:3", "field 'input'"}},
      {"- match: contains\n  patterns: [a]\n  input: 1\n  output: .inf\n",
       {"p.yaml:4", "field 'output'"}},
      {"- match: contains\n  patterns: a\n  input: 1\n  output: 2\n",
       {"p.yaml:2", "field 'patterns'", "list"}},
      {"- match: contains\n  patterns: []\n  input: 1\n  output: 2\n",
       {"field 'patterns'", "non-empty"}},
      {"- match: contains\n  patterns: [[a]]\n  input: 1\n  output: 2\n",
       {"rule 1", "field 'patterns'"}},
      {"- match: contains\n  patterns: [a]\n  input: 1\n  output: 2\n  cache: 3\n",
       {"p.yaml:5", "rule 1", "field 'cache'", "unknown field"}},
      {"- match: regex\n  patterns: ['claude-(']\n  input: 1\n  output: 2\n",
       {"rule 1", "field 'patterns'", "invalid regex 'claude-('"}},
      {"- match: contains\n  patterns: [a\n", {"p.yaml:", "invalid YAML"}},
      {"- 3\n", {"p.yaml:1", "rule 1", "mapping"}},
  };
  for (const auto& c : cases) {
    const auto t = PricingTable::parse_yaml(c.text, "p.yaml");
    ASSERT_FALSE(t) << c.text;
    EXPECT_EQ(t.error().code, ErrorCode::Config) << c.text;
    for (const auto& s : c.expected) EXPECT_THAT(t.error().message, HasSubstr(s)) << c.text;
  }
}

// Compiled patterns are shared by every thread of the process (`kernex serve` prices on many run
// threads): many threads pricing at once, each with tables of its own that come and go, get the
// same answers as one thread does.
TEST(Pricing, ThreadsPricingAtOnceShareCompiledPatterns) {
  const std::vector<std::pair<std::string, double>> cases = {{"claude-opus-4-5", 5},
                                                             {"claude-opus-4-1", 15},
                                                             {"claude-opus-4-10", 5},
                                                             {"claude-opus-4-20250514", 15},
                                                             {"CLAUDE-OPUS-4-7", 5}};
  std::vector<std::thread> threads;
  std::vector<int> wrong(8, 0);
  for (std::size_t t = 0; t < wrong.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        // A table of this thread's own, with a pattern only it uses, made and dropped each time.
        auto own =
            PricingTable::parse_yaml("- match: regex\n  patterns: ['^thread-" + std::to_string(t) +
                                         "-[0-9]+$']\n"
                                         "  input: 7\n  output: 8\n",
                                     "own");
        if (!own || !own->pricing_for("thread-" + std::to_string(t) + "-" + std::to_string(i)) ||
            own->pricing_for("thread-" + std::to_string(t) + "-x"))
          ++wrong[t];
        for (const auto& [model, input] : cases) {
          const auto p = table().pricing_for(model);
          if (!p || p->input_per_mtok != input) ++wrong[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_THAT(wrong, ::testing::Each(0));
}

}  // namespace
}  // namespace kernex
