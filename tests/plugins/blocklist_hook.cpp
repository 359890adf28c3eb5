// A hook that blocks the tools named in its config: {"block": ["name", ...]}.
#include <set>

#include "kernex/plugin.hpp"

namespace {

class BlocklistHook final : public kernex::HookRunner {
 public:
  explicit BlocklistHook(std::set<std::string> blocked) : blocked_(std::move(blocked)) {}
  kernex::HookOutcome pre_tool(const kernex::HookScope&, kernex::ToolCall& call) override {
    if (blocked_.contains(call.name))
      return kernex::HookOutcome::block(call.name + " is on the blocklist");
    return kernex::HookOutcome::allow();
  }

 private:
  std::set<std::string> blocked_;
};

kernex::Result<std::shared_ptr<kernex::HookRunner>> make_blocklist(const kernex::Json& config) {
  std::set<std::string> blocked;
  if (config.contains("block")) {
    const kernex::Json& list = config["block"];
    if (!list.is_array())
      return kernex::fail(kernex::ErrorCode::Config,
                          "blocklist: 'block' must be an array of strings");
    for (const kernex::Json& item : list) {
      if (!item.is_string())
        return kernex::fail(kernex::ErrorCode::Config,
                            "blocklist: 'block' must be an array of strings");
      blocked.insert(item.get<std::string>());
    }
  }
  return std::make_shared<BlocklistHook>(std::move(blocked));
}

}  // namespace

KERNEX_PLUGIN(Hook, "blocklist", "1.0.0", "Blocks the tools listed in config.block", make_blocklist)
