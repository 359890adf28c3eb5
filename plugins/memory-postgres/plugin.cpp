// The `postgres` memory plugin: one store shared by many kernel processes. Options (all optional):
//   dsn: libpq connection string or URI (absent: the PG* environment variables)
//   pool_size: 4    statement_timeout_ms: 30000    connect_timeout_s: 5
//   max_message_bytes: 4194304 (one message's content, tool data included)
//   data_dir: set by the kernel for every memory plugin; accepted and unused
#include "kernex/number.hpp"
#include "kernex/plugin.hpp"

#include <algorithm>

#include "pg_store.hpp"

namespace {

using kernex::ErrorCode;
using kernex::Json;
using kernex::Result;

Result<std::uint64_t> positive(const Json& v, const std::string& key, std::uint64_t max) {
  if (auto problem = kernex::uint_problem(v, 1, max))
    return kernex::fail(ErrorCode::Config, "postgres memory: option '" + key + "': " + *problem);
  return v.get<std::uint64_t>();
}

Result<kernex::postgres::StoreOptions> parse_options(const Json& config) {
  kernex::postgres::StoreOptions out;
  out.connection.what = "postgres memory";
  out.connection.application_name = "kernex memory";
  if (config.is_null()) return out;
  if (!config.is_object())
    return kernex::fail(ErrorCode::Config, "postgres memory: options must be a mapping");
  for (const auto& [key, value] : config.items()) {
    if (key == "dsn") {
      // Never echo the value: it may hold a password.
      if (!value.is_string())
        return kernex::fail(ErrorCode::Config, "postgres memory: option 'dsn' must be a string");
      out.connection.dsn = value.get<std::string>();
    } else if (key == "data_dir") {
      if (!value.is_string()) {
        return kernex::fail(ErrorCode::Config,
                            "postgres memory: option 'data_dir' must be a string");
      }
    } else if (key == "pool_size") {
      KERNEX_ASSIGN_OR_RETURN(auto v, positive(value, key, 256));
      out.pool_size = v;
    } else if (key == "statement_timeout_ms") {
      KERNEX_ASSIGN_OR_RETURN(auto v, positive(value, key, 3600000));
      out.connection.statement_timeout = std::chrono::milliseconds(v);
    } else if (key == "connect_timeout_s") {
      KERNEX_ASSIGN_OR_RETURN(auto v, positive(value, key, 600));
      out.connection.connect_timeout = std::chrono::seconds(v);
    } else if (key == "max_message_bytes") {
      KERNEX_ASSIGN_OR_RETURN(auto v, positive(value, key, 1ull << 30));
      out.max_message_bytes = v;
    } else {
      return kernex::fail(ErrorCode::Config,
                          "postgres memory: unknown option '" + key +
                              "' (known: dsn, pool_size, statement_timeout_ms, connect_timeout_s, "
                              "max_message_bytes, data_dir)");
    }
  }
  return out;
}

Result<std::shared_ptr<kernex::MemoryStore>> make_postgres(const Json& config) {
  KERNEX_ASSIGN_OR_RETURN(auto options, parse_options(config));
  KERNEX_ASSIGN_OR_RETURN(auto store, kernex::postgres::PgStore::open(options));
  return std::shared_ptr<kernex::MemoryStore>(store);
}

}  // namespace

KERNEX_PLUGIN(Memory, "postgres", "1.0.0",
              "Shared PostgreSQL store: history, recall, facts, tasks, usage", make_postgres)
