// Sandbox profile YAML (`kernex sandbox`, toolbox and skill profiles).
#include "fuzz.hpp"
#include "kernex/sandbox/profile.hpp"

KERNEX_FUZZ_TARGET(sandbox_profile) {
  auto profile =
      kernex::sandbox::SandboxProfile::from_yaml(kernex::fuzz::text(data, size), "profile.yaml");
  if (!profile) (void)profile.error().describe();
  return 0;
}
