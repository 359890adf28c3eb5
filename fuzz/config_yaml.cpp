// kernex.yaml: the whole config parse (YAML, then every section's conversion and checks).
#include "fuzz.hpp"
#include "kernex/config.hpp"

KERNEX_FUZZ_TARGET(config_yaml) {
  auto config = kernex::Config::parse_yaml(kernex::fuzz::text(data, size), "fuzz.yaml");
  if (!config) (void)config.error().describe();
  return 0;
}
