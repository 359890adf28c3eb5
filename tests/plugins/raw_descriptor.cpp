// Hand-written descriptors that break one rule each (ABI, kind, name, missing factory). The
// values come from compile definitions; the factory must never be called by the host.
#include "kernex/plugin.hpp"

namespace raw_plugin {

kernex::Result<std::shared_ptr<kernex::Provider>> create(const kernex::Json&) {
  return kernex::fail(kernex::ErrorCode::Internal, "a broken plugin's factory was called");
}

const kernex::PluginDescriptor descriptor{TEST_ABI, static_cast<kernex::PluginKind>(TEST_KIND),
                                          TEST_NAME, "1.0.0", "deliberately broken"};

}  // namespace raw_plugin

BOOST_DLL_ALIAS(raw_plugin::descriptor, kernex_plugin_descriptor)
BOOST_DLL_ALIAS(raw_plugin::create, TEST_FACTORY_ALIAS)
