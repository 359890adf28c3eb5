// The plugin ABI. A plugin is a shared library exporting, through Boost.DLL aliases, a
// descriptor (read before anything else is called) and one factory for its kind.
#pragma once

#include <cstdint>
#include <memory>

#include <boost/dll/alias.hpp>

#include "kernex/channel.hpp"
#include "kernex/error.hpp"
#include "kernex/hooks.hpp"
#include "kernex/json.hpp"
#include "kernex/memory.hpp"
#include "kernex/provider.hpp"
#include "kernex/toolbox.hpp"

namespace kernex {

// Bumped on any change to the public headers' types or interfaces.
// 4: RunHandles beside the Context in ToolExecutor::execute; Context holds data only;
//    MemoryStore::save_exchange (one write per turn's exchange and usage).
// 5: RunServices::tools / call_tool / submit_result (tools called from code);
//    RunResult::result; Context::workspace_layers and RunOptions::workspace_layers (overlay
//    workspace).
// 6: approvals (HookOutcome::asks, PermissionRules ask list, RunOptions::approver, RunJournal);
//    the channel kind (channel.hpp).
// 7: MemoryScope on every MemoryStore call (the tenant), RunOptions::memory_scope;
//    MemoryStore::check_message (asked before the first provider request).
// 8: Context::generation, client tools and Outcome::ClientToolCalls, RunOptions::turn /
//    memory_with_history (the OpenAI surface); ExchangeRecord::idempotency_key and
//    RunOptions::exchange_key (exactly-once exchanges); ToolResult::structured,
//    RunHandles::code_result_max_bytes and RunServices::call_tool's result_max_bytes (a tool
//    called from code returns its whole result, up to the code's cap).
// 9: ExchangeRecord::audits and MemoryStore::audits_in_exchange (a turn's audit rows ride its
//    exchange's write).
//    kernex::Budgets, the four run budgets declared once: Limits::budgets and RunOptions::budgets
//    replace their max_turns, token_budget, cost_budget_usd and tool_call_budget members.
// 10: Provider::start, the optional asynchronous call, and kernex/suspend.hpp (a run that waits
//    on its model or a socket holds no thread where the host runs it on a fiber).
inline constexpr std::uint32_t kAbiVersion = 10;

enum class PluginKind : std::uint32_t {
  Provider = 1,
  Memory = 2,
  Hook = 3,
  Toolbox = 4,
  Channel = 5
};

// Plain data so the host can read it without running plugin code.
struct PluginDescriptor {
  std::uint32_t abi_version;
  PluginKind kind;
  const char* name;
  const char* version;
  const char* description;
};

// Factories take the plugin's JSON config (an object, possibly empty). They return an error
// (or throw) on bad config; the host turns either into a typed error naming the file.
using ProviderFactory = Result<std::shared_ptr<Provider>>(const Json& config);
using MemoryFactory = Result<std::shared_ptr<MemoryStore>>(const Json& config);
using HookFactory = Result<std::shared_ptr<HookRunner>>(const Json& config);
using ToolboxFactory = Result<std::shared_ptr<ToolExecutor>>(const Json& config);
using ChannelFactory = Result<std::shared_ptr<Channel>>(const Json& config);

template <PluginKind K>
struct PluginTraits;
template <>
struct PluginTraits<PluginKind::Provider> {
  using Interface = Provider;
  static constexpr const char* factory_symbol = "kernex_create_Provider";
};
template <>
struct PluginTraits<PluginKind::Memory> {
  using Interface = MemoryStore;
  static constexpr const char* factory_symbol = "kernex_create_Memory";
};
template <>
struct PluginTraits<PluginKind::Hook> {
  using Interface = HookRunner;
  static constexpr const char* factory_symbol = "kernex_create_Hook";
};
template <>
struct PluginTraits<PluginKind::Toolbox> {
  using Interface = ToolExecutor;
  static constexpr const char* factory_symbol = "kernex_create_Toolbox";
};
template <>
struct PluginTraits<PluginKind::Channel> {
  using Interface = Channel;
  static constexpr const char* factory_symbol = "kernex_create_Channel";
};

inline constexpr const char* kDescriptorSymbol = "kernex_plugin_descriptor";

}  // namespace kernex

#define KERNEX_PLUGIN_CAT2(a, b) a##b
#define KERNEX_PLUGIN_CAT(a, b) KERNEX_PLUGIN_CAT2(a, b)

// Registers one plugin per shared library. KIND is Provider, Memory, Hook, Toolbox or Channel;
// FACTORY a function `kernex::Result<std::shared_ptr<Interface>>(const kernex::Json&)`.
//   KERNEX_PLUGIN(Provider, "replay", "1.0.0", "Plays a scripted conversation", make_replay)
#define KERNEX_PLUGIN(KIND, NAME, VERSION, DESCRIPTION, FACTORY)                                   \
  namespace kernex_plugin_export {                                                                 \
  const ::kernex::PluginDescriptor descriptor{::kernex::kAbiVersion, ::kernex::PluginKind::KIND,   \
                                              NAME, VERSION, DESCRIPTION};                         \
  ::kernex::Result<std::shared_ptr<::kernex::PluginTraits<::kernex::PluginKind::KIND>::Interface>> \
  create(const ::kernex::Json& config) {                                                           \
    return FACTORY(config);                                                                        \
  }                                                                                                \
  }                                                                                                \
  BOOST_DLL_ALIAS(kernex_plugin_export::descriptor, kernex_plugin_descriptor)                      \
  BOOST_DLL_ALIAS(kernex_plugin_export::create, KERNEX_PLUGIN_CAT(kernex_create_, KIND))
