// An ordinary shared library that is not a plugin. If the host ever maps it, its static
// initializer leaves a mark in the environment that the test looks for.
#include <cstdlib>

#include <boost/config.hpp>

namespace {
struct Mark {
  Mark() { setenv("KERNEX_TEST_NO_DESCRIPTOR_LOADED", "1", 1); }
} mark;
}  // namespace

extern "C" BOOST_SYMBOL_EXPORT int kernex_test_not_a_plugin() { return 7; }
