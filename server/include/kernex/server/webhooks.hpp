// `kernex serve webhooks ...`: the webhook deliveries in <data_dir>/serve.db, or in the shared
// PostgreSQL database in cluster mode, read and changed directly (running servers pick retried
// rows up within a second).
#pragma once

#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

namespace kernex {
struct Config;
}

namespace kernex::server {

// "list [--failed] [--json]" (newest first: id, status, type, event id, url, attempts, created,
// last error) or "retry ID... | retry --all-failed" (failed deliveries become pending, due now,
// with a fresh max age). Returns the CLI's exit code: 0 ok, 1 I/O error, 2 usage.
int serve_webhooks_command(const std::filesystem::path& serve_db,
                           const std::vector<std::string>& args, std::ostream& out,
                           std::ostream& err);
// The same on the store `config` serves from: the postgres memory store's database (cluster
// mode), else <data_dir>/serve.db.
int serve_webhooks_command(const Config& config, const std::vector<std::string>& args,
                           std::ostream& out, std::ostream& err);

}  // namespace kernex::server
