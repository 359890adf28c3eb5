// API keys for `kernex serve`: a JSON keys file holding only SHA-256 digests of the keys, each
// bound to a tenant. The server resolves a presented bearer key to its tenant; `kernex serve keys`
// adds, lists and revokes keys, and a running server picks the changes up via reload_if_changed().
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/error.hpp"

namespace kernex::server {

// Tenant names become directory names: [A-Za-z0-9_.-]{1,64}, and never "." or "..".
bool valid_tenant_name(std::string_view name) noexcept;
Result<void> check_tenant_name(std::string_view name);

// One stored key, as listed; the key itself is never stored.
struct KeyEntry {
  std::string id;  // random, public: names the key in `keys list` and `keys revoke --id`
  std::string tenant;
  std::string sha256;                  // lower-case hex digest of the whole key text ("kx-...")
  std::string created;                 // UTC, "2025-01-31T12:00:00Z"
  std::optional<std::string> revoked;  // UTC time of revocation; a revoked key never matches
};

// The keys file: {"version": 1, "keys": [{"id", "tenant", "sha256", "created", "revoked"?}, ...]},
// mode 0600 and owned by the server's user; anything else is refused when read. Every write goes
// through a 0600 temporary file, fsync and rename, under an flock on "<file>.lock", so concurrent
// `keys add` commands don't lose each other's keys and the server never reads half a file.
//
// All methods are thread-safe: tenant_for() may run on many threads while another reloads.
class KeyStore {
 public:
  // A missing file is an empty store. A file that is group/world-accessible, not ours, not a
  // regular file, malformed or carries unknown fields is an error naming the file and what was
  // expected.
  static Result<KeyStore> load(std::filesystem::path file);

  KeyStore(KeyStore&&) noexcept;
  KeyStore& operator=(KeyStore&&) noexcept;
  ~KeyStore();

  const std::filesystem::path& file() const noexcept;

  // Generates "kx-" + base64url(32 random bytes), stores its digest for `tenant` and saves.
  // Returns the key: the only time it exists outside the client.
  Result<std::string> add(std::string_view tenant);

  // Entries as last loaded or written, secrets never included.
  std::vector<KeyEntry> list() const;

  // Revokes every unrevoked key of `tenant` and saves; returns how many were revoked (0 is not an
  // error).
  Result<std::size_t> revoke(std::string_view tenant);
  // Revokes the one key whose id is `id` (exact match); returns 0 or 1.
  Result<std::size_t> revoke_id(std::string_view id);

  // The tenant owning `presented_key`, if it is a stored, unrevoked key. The presented key's digest
  // is compared with every stored digest in constant time (CRYPTO_memcmp, no early exit).
  std::optional<std::string> tenant_for(std::string_view presented_key) const;

  // Re-reads the file when its identity, size or mtime changed since the last read or write.
  // Returns true if it reloaded. On an error the previous keys stay in force.
  Result<bool> reload_if_changed();

  struct State;  // implementation detail

 private:
  explicit KeyStore(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// The actions of `kernex serve keys` on `keys_file` (the CLI parses the command line; these act
// and print). Errors are typed: Usage for a bad tenant name, Config for a bad keys file, Io.
// Adds a key for `tenant` and prints it on `out`, the one time it is shown; the note goes to
// `note`.
Result<void> keys_add(const std::filesystem::path& keys_file, std::string_view tenant,
                      std::ostream& out, std::ostream& note);
// One line per key: id, tenant, created, "active" or "revoked <when>" (never the key).
Result<void> keys_list(const std::filesystem::path& keys_file, std::ostream& out);
// Revokes every key of `tenant` and prints "revoked N key(s)".
Result<void> keys_revoke(const std::filesystem::path& keys_file, std::string_view tenant,
                         std::ostream& out);
// Revokes the key whose id is `id` and prints "revoked N key(s)".
Result<void> keys_revoke_id(const std::filesystem::path& keys_file, std::string_view id,
                            std::ostream& out);

}  // namespace kernex::server
