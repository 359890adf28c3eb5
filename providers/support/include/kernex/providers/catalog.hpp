// The network providers this tree builds and the OpenAI-compatible presets, with their
// defaults. Read by the plugins and by `kernex providers`.
#pragma once

#include <array>
#include <string_view>

namespace kernex::providers {

struct CatalogEntry {
  std::string_view name;  // plugin name, also `--provider NAME`
  std::string_view api;   // "openai" | "anthropic" | "ollama" | "gemini"
  std::string_view base_url;
  std::string_view default_model;
  std::string_view key_env;  // empty: no key
};

// The OpenAI-compatible presets: each is also the `preset` option of the openai plugin.
inline constexpr std::array<CatalogEntry, 7> kOpenAiPresets{{
    {"openai", "openai", "https://api.openai.com/v1", "gpt-4o", "OPENAI_API_KEY"},
    {"openrouter", "openai", "https://openrouter.ai/api/v1", "anthropic/claude-sonnet-4-6",
     "OPENROUTER_API_KEY"},
    {"groq", "openai", "https://api.groq.com/openai/v1", "llama-3.3-70b-versatile", "GROQ_API_KEY"},
    {"mistral", "openai", "https://api.mistral.ai/v1", "mistral-small-latest", "MISTRAL_API_KEY"},
    {"deepseek", "openai", "https://api.deepseek.com/v1", "deepseek-chat", "DEEPSEEK_API_KEY"},
    {"fireworks", "openai", "https://api.fireworks.ai/inference/v1",
     "accounts/fireworks/models/llama-v3p3-70b-instruct", "FIREWORKS_API_KEY"},
    {"xai", "openai", "https://api.x.ai/v1", "grok-3-mini", "XAI_API_KEY"},
}};

inline constexpr std::array<CatalogEntry, 3> kOtherProviders{{
    {"anthropic", "anthropic", "https://api.anthropic.com/v1", "claude-sonnet-4-6",
     "ANTHROPIC_API_KEY"},
    {"gemini", "gemini", "https://generativelanguage.googleapis.com/v1beta", "gemini-2.5-flash",
     "GEMINI_API_KEY"},
    {"ollama", "ollama", "http://localhost:11434", "llama3.2", ""},
}};

inline const CatalogEntry* find_catalog_entry(std::string_view name) {
  for (const auto& e : kOpenAiPresets) {
    if (e.name == name) return &e;
  }
  for (const auto& e : kOtherProviders) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

}  // namespace kernex::providers
