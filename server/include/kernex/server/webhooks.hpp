// The actions of `kernex serve webhooks` (cli/ parses the command line): the webhook deliveries in
// <data_dir>/serve.db, or in the shared PostgreSQL database in cluster mode, read and changed
// directly (running servers pick retried rows up within a second).
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "kernex/error.hpp"

namespace kernex {
struct Config;
}

namespace kernex::server {

// Where the deliveries are: the postgres memory store's database when `pg_dsn` is set (cluster
// mode), else `serve_db` (a missing serve.db is an empty outbox: nothing was ever sent).
struct WebhookOutboxPlace {
  std::filesystem::path serve_db;
  std::optional<std::string> pg_dsn;
  // The store `config` serves from: its postgres memory store, else <data_dir>/serve.db.
  static WebhookOutboxPlace of(const Config& config);
};

struct WebhookListOptions {
  bool failed = false;  // only the deliveries that gave up
  bool json = false;    // a JSON array instead of tab-separated lines
};

// Newest first: id, status, type, event id, url, attempts, created, last error.
Result<void> webhooks_list(const WebhookOutboxPlace& place, WebhookListOptions options,
                           std::ostream& out);

// Which failed deliveries `webhooks_retry` revives.
struct WebhookRetry {
  std::vector<std::int64_t> ids;  // these (each > 0)...
  bool all_failed = false;        // ...or every failed one (then `ids` must be empty)
};
// The failed deliveries become pending, due now, with a fresh max age: prints "retrying N
// deliveries" on `out`, and on `note` how many of the ids named no failed delivery. A Usage error
// when `retry` names nothing or both.
Result<void> webhooks_retry(const WebhookOutboxPlace& place, const WebhookRetry& retry,
                            std::ostream& out, std::ostream& note);

}  // namespace kernex::server
