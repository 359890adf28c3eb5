// The actions of `kernex serve keys` (add, list, revoke) over the keys file; cli/ parses.
#include <ostream>

#include "kernex/server/keys.hpp"

namespace kernex::server {
namespace {

void print_revoked(std::size_t n, std::ostream& out) {
  out << "revoked " << n << (n == 1 ? " key" : " keys") << '\n';
}

}  // namespace

Result<void> keys_add(const std::filesystem::path& keys_file, std::string_view tenant,
                      std::ostream& out, std::ostream& note) {
  KERNEX_ASSIGN_OR_RETURN(auto store, KeyStore::load(keys_file));
  KERNEX_ASSIGN_OR_RETURN(auto key, store.add(tenant));
  out << key << '\n';
  note << "kernex: added a key for tenant '" << tenant << "' to " << keys_file.string()
       << "; it is shown only this once\n";
  return {};
}

Result<void> keys_list(const std::filesystem::path& keys_file, std::ostream& out) {
  KERNEX_ASSIGN_OR_RETURN(auto store, KeyStore::load(keys_file));
  for (const auto& k : store.list()) {
    out << k.id << '\t' << k.tenant << '\t' << k.created << '\t'
        << (k.revoked ? "revoked " + *k.revoked : std::string("active")) << '\n';
  }
  return {};
}

Result<void> keys_revoke(const std::filesystem::path& keys_file, std::string_view tenant,
                         std::ostream& out) {
  KERNEX_ASSIGN_OR_RETURN(auto store, KeyStore::load(keys_file));
  KERNEX_ASSIGN_OR_RETURN(auto revoked, store.revoke(tenant));
  print_revoked(revoked, out);
  return {};
}

Result<void> keys_revoke_id(const std::filesystem::path& keys_file, std::string_view id,
                            std::ostream& out) {
  KERNEX_ASSIGN_OR_RETURN(auto store, KeyStore::load(keys_file));
  KERNEX_ASSIGN_OR_RETURN(auto revoked, store.revoke_id(id));
  print_revoked(revoked, out);
  return {};
}

}  // namespace kernex::server
