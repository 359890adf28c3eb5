// A provider whose factory reports success but hands back no object.
#include "kernex/plugin.hpp"

namespace {

kernex::Result<std::shared_ptr<kernex::Provider>> make_null(const kernex::Json&) {
  return std::shared_ptr<kernex::Provider>();
}

}  // namespace

KERNEX_PLUGIN(Provider, "null", "1.0.0", "Factory returns nullptr", make_null)
