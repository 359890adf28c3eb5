// PII guard: tool outputs pass through it before the model sees them. E-mail addresses, phone
// numbers, card numbers and key-shaped secrets become stable tokens ("[EMAIL_1]": the same value
// gets the same token for the whole conversation), and when the model passes a token back as a
// tool argument, the tool receives the real value. The model never needs the data itself to
// route it from one tool to another.
//
// Config (all optional):
//   kinds    which kinds to replace: ["email", "phone", "card", "secret"] (default: all)
//   rules    [{tool: GLOB, kinds: [...]}]: per tool name, first match wins; kinds [] turns the
//            guard off for those tools. Skills are addressed through their tools' names (a skill's
//            toolbox names, or "<server>__*" for the tools of an MCP server it declares).
//   restore  put real values back into tool arguments (default true)
#include <map>
#include <mutex>

#include "kernex/plugin.hpp"
#include "pii_scanner.hpp"

namespace kernex::pii {
namespace {

bool glob_match(std::string_view pattern, std::string_view text) {
  std::size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p, ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

struct Rule {
  std::string tool;
  std::vector<Kind> kinds;
};

// Tokens issued in one conversation, both ways.
struct Vault {
  std::map<std::string, std::string> token_of;  // value -> token
  std::map<std::string, std::string> value_of;  // token -> value
  std::map<Kind, std::size_t> issued;
};

constexpr std::size_t kMaxTokensPerSession = 100'000;

class PiiHook final : public HookRunner {
 public:
  PiiHook(std::vector<Kind> kinds, std::vector<Rule> rules, bool restore)
      : kinds_(std::move(kinds)), rules_(std::move(rules)), restore_(restore) {}

  HookOutcome pre_tool(const HookScope& scope, ToolCall& call) override {
    if (!restore_) return HookOutcome::allow();
    std::lock_guard lock(mutex_);
    auto it = vaults_.find(scope.session_id);
    if (it == vaults_.end() || it->second.value_of.empty()) return HookOutcome::allow();
    restore(call.arguments, it->second);
    return HookOutcome::allow();
  }

  // The text and every string of the structured result (what code gets) alike: the same value
  // gets the same token in both.
  void post_tool(const HookScope& scope, const ToolCall& call, ToolResult& result) override {
    const std::vector<Kind>& kinds = kinds_for(call.name);
    if (kinds.empty()) return;
    tokenise(scope, kinds, result.content);
    tokenise_strings(scope, kinds, result.structured);
  }

 private:
  void tokenise_strings(const HookScope& scope, const std::vector<Kind>& kinds, Json& value) {
    if (value.is_string()) {
      tokenise(scope, kinds, value.get_ref<std::string&>());
    } else if (value.is_array()) {
      for (auto& item : value) tokenise_strings(scope, kinds, item);
    } else if (value.is_object()) {
      Json out = Json::object();  // keys are data too: {"alice@example.com": ...}
      for (auto& [key, item] : value.items()) {
        std::string name = key;
        tokenise(scope, kinds, name);
        tokenise_strings(scope, kinds, item);
        out[name] = std::move(item);
      }
      value = std::move(out);
    }
  }

  void tokenise(const HookScope& scope, const std::vector<Kind>& kinds, std::string& text) {
    const auto matches = scan(text, kinds);
    if (matches.empty()) return;
    std::lock_guard lock(mutex_);
    Vault& vault = vaults_[scope.session_id];
    std::string out;
    out.reserve(text.size());
    std::size_t at = 0;
    for (const auto& m : matches) {
      out.append(text, at, m.begin - at);
      out += token(vault, m.kind, text.substr(m.begin, m.end - m.begin));
      at = m.end;
    }
    out.append(text, at);
    text = std::move(out);
  }

  const std::vector<Kind>& kinds_for(const std::string& tool) const {
    for (const auto& rule : rules_) {
      if (glob_match(rule.tool, tool)) return rule.kinds;
    }
    return kinds_;
  }

  static std::string token(Vault& vault, Kind kind, const std::string& value) {
    if (auto it = vault.token_of.find(value); it != vault.token_of.end()) return it->second;
    if (vault.token_of.size() >= kMaxTokensPerSession)
      return std::string("[") + kind_name(kind) + "]";  // redacted, not restorable
    std::string t =
        std::string("[") + kind_name(kind) + "_" + std::to_string(++vault.issued[kind]) + "]";
    vault.token_of.emplace(value, t);
    vault.value_of.emplace(t, value);
    return t;
  }

  // Every string in the arguments: each issued token it contains becomes its value again.
  static void restore(Json& j, const Vault& vault) {
    if (j.is_string()) {
      const std::string& s = j.get_ref<const std::string&>();
      if (s.find('[') == std::string::npos) return;
      std::string out;
      std::size_t at = 0;
      for (std::size_t open = s.find('['); open != std::string::npos;
           open = s.find('[', open + 1)) {
        const auto close = s.find(']', open);
        if (close == std::string::npos) break;
        auto it = vault.value_of.find(s.substr(open, close - open + 1));
        if (it == vault.value_of.end()) continue;
        out.append(s, at, open - at);
        out += it->second;
        at = close + 1;
        open = close;
      }
      if (at == 0) return;
      out.append(s, at);
      j = std::move(out);
    } else if (j.is_structured()) {
      for (auto& v : j) restore(v, vault);
    }
  }

  std::vector<Kind> kinds_;
  std::vector<Rule> rules_;
  bool restore_;
  std::mutex mutex_;
  std::map<std::string, Vault> vaults_;  // by conversation (HookScope::session_id)
};

Result<std::vector<Kind>> kinds_from(const Json& j, const std::string& where) {
  if (!j.is_array())
    return fail(ErrorCode::Config,
                "hook-pii: `" + where + "` must be a list of kinds (email, phone, card, secret)");
  std::vector<Kind> out;
  for (const auto& k : j) {
    Kind kind{};
    if (!k.is_string() || !parse_kind(k.get<std::string>(), kind)) {
      return fail(ErrorCode::Config, "hook-pii: `" + where + "`: unknown kind " + k.dump() +
                                         " (expected email, phone, card, secret)");
    }
    out.push_back(kind);
  }
  return out;
}

Result<std::shared_ptr<HookRunner>> make_pii(const Json& config) {
  if (!config.is_null() && !config.is_object())
    return fail(ErrorCode::Config, "hook-pii: config must be an object");
  std::vector<Kind> kinds{Kind::Email, Kind::Phone, Kind::Card, Kind::Secret};
  std::vector<Rule> rules;
  bool restore = true;
  if (config.is_object()) {
    for (const auto& [key, value] : config.items()) {
      if (key == "kinds") {
        KERNEX_ASSIGN_OR_RETURN(auto k, kinds_from(value, "kinds"));
        kinds = std::move(k);
      } else if (key == "rules") {
        if (!value.is_array())
          return fail(ErrorCode::Config, "hook-pii: `rules` must be a list of {tool, kinds}");
        for (std::size_t i = 0; i < value.size(); ++i) {
          const Json& r = value[i];
          const std::string where = "rules[" + std::to_string(i) + "]";
          if (!r.is_object() || !r.contains("tool") || !r["tool"].is_string() ||
              !r.contains("kinds")) {
            return fail(ErrorCode::Config,
                        "hook-pii: `" + where + "` must be {tool: GLOB, kinds: [...]}");
          }
          KERNEX_ASSIGN_OR_RETURN(auto k, kinds_from(r["kinds"], where + ".kinds"));
          rules.push_back({r["tool"].get<std::string>(), std::move(k)});
        }
      } else if (key == "restore") {
        if (!value.is_boolean())
          return fail(ErrorCode::Config, "hook-pii: `restore` must be true or false");
        restore = value.get<bool>();
      } else {
        return fail(ErrorCode::Config,
                    "hook-pii: `" + key + "` is not an option (expected kinds, rules, restore)");
      }
    }
  }
  return std::make_shared<PiiHook>(std::move(kinds), std::move(rules), restore);
}

}  // namespace
}  // namespace kernex::pii

KERNEX_PLUGIN(Hook, "pii", "1.0.0",
              "Replaces personal data and secrets in tool output with stable tokens",
              kernex::pii::make_pii)
