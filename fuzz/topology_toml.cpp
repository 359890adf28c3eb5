// TOPOLOGY.toml (kernex's topology format) through topology::parse, with agents a and b present.
#include "fuzz.hpp"
#include "topology_files.hpp"

KERNEX_FUZZ_TARGET(topology_toml) {
  kernex::fuzz::judge_topology(kernex::fuzz::text(data, size), false);
  return 0;
}
