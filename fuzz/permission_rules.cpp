// Permission rules files, then the parsed rules checked against a tool call whose arguments come
// from the rest of the input: `<rules yaml>\n---\n<tool name>\n<arguments JSON>`.
#include "fuzz.hpp"
#include "kernex/permissions.hpp"

KERNEX_FUZZ_TARGET(permission_rules) {
  const std::string_view input = kernex::fuzz::text(data, size);
  const auto split = input.find("\n---\n");
  auto rules = kernex::PermissionRules::parse_yaml(input.substr(0, split), "rules.yaml");
  if (!rules || split == std::string_view::npos) return 0;
  const std::string_view call = input.substr(split + 5);
  const auto line = call.find('\n');
  const std::string_view tool = call.substr(0, line);
  kernex::Json args = line == std::string_view::npos
                          ? kernex::Json::object()
                          : kernex::parse_untrusted(call.substr(line + 1));
  if (args.is_discarded()) args = kernex::Json::object();
  (void)rules->check(tool, args);
  return 0;
}
