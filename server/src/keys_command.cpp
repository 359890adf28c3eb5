// `kernex serve keys add|list|revoke`: the CLI's view of the keys file.
#include <ostream>

#include "kernex/server/keys.hpp"

namespace kernex::server {
namespace {

constexpr const char* kUsage =
    "usage: kernex serve keys add TENANT | list | revoke TENANT | revoke --id KEY_ID";

// The CLI's exit codes (cli/exit_codes.hpp) for the errors this command can meet.
int exit_code_for(const Error& e) {
  switch (e.code) {
    case ErrorCode::Usage:
      return 2;
    case ErrorCode::Config:
      return 3;
    default:
      return 1;
  }
}

int report(const Error& e, std::ostream& err) {
  err << "kernex: " << to_string(e.code) << ": " << e.describe() << '\n';
  return exit_code_for(e);
}

int usage(std::ostream& err, const std::string& problem) {
  err << "kernex: usage: " << problem << '\n' << kUsage << '\n';
  return 2;
}

}  // namespace

int serve_keys_command(const std::filesystem::path& keys_file, const std::vector<std::string>& args,
                       std::ostream& out, std::ostream& err) {
  if (args.empty()) return usage(err, "serve keys: expected an action");
  const std::string& action = args[0];
  const bool one_operand = args.size() == 2;
  if (action == "add" && !one_operand) return usage(err, "serve keys add: expected one TENANT");
  if (action == "list" && args.size() != 1)
    return usage(err, "serve keys list: expected no operands");
  const bool by_id = action == "revoke" && args.size() >= 2 && args[1] == "--id";
  if (action == "revoke" && (by_id ? args.size() != 3 : !one_operand)) {
    return usage(err, "serve keys revoke: expected TENANT or --id KEY_ID");
  }
  if (action != "add" && action != "list" && action != "revoke") {
    return usage(err, "serve keys: unknown action '" + action + "'");
  }
  auto store = KeyStore::load(keys_file);
  if (!store) return report(store.error(), err);

  if (action == "add") {
    auto key = store->add(args[1]);
    if (!key) return report(key.error(), err);
    out << *key << '\n';
    err << "kernex: added a key for tenant '" << args[1] << "' to " << keys_file.string()
        << "; it is shown only this once\n";
    return 0;
  }
  if (action == "list") {
    for (const auto& k : store->list()) {
      out << k.id << '\t' << k.tenant << '\t' << k.created << '\t'
          << (k.revoked ? "revoked " + *k.revoked : std::string("active")) << '\n';
    }
    return 0;
  }
  auto revoked = by_id ? store->revoke_id(args[2]) : store->revoke(args[1]);
  if (!revoked) return report(revoked.error(), err);
  out << "revoked " << *revoked << (*revoked == 1 ? " key" : " keys") << '\n';
  return 0;
}

}  // namespace kernex::server
