// A provider whose factory always throws: a std::exception, or an int when config has "int".
#include <stdexcept>

#include "kernex/plugin.hpp"

namespace {

kernex::Result<std::shared_ptr<kernex::Provider>> make_throwing(const kernex::Json& config) {
  if (config.contains("int")) throw 42;
  throw std::runtime_error("boom from the factory");
}

}  // namespace

KERNEX_PLUGIN(Provider, "throws", "1.0.0", "Factory throws", make_throwing)
