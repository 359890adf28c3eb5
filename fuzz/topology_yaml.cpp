// TOPOLOGY.yaml (the same schema in YAML) through topology::parse, with agents a and b present.
#include "fuzz.hpp"
#include "topology_files.hpp"

KERNEX_FUZZ_TARGET(topology_yaml) {
  kernex::fuzz::judge_topology(kernex::fuzz::text(data, size), true);
  return 0;
}
