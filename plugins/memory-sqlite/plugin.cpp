// The `sqlite` memory plugin. Options (all optional but one of path / data_dir):
//   path: database file (default <data_dir>/memory.db)      data_dir: set by the kernel
//   busy_timeout_ms: 5000 (1..600000)    synchronous: normal | full (WAL; normal survives process
//   crashes) max_size_mb: cap on the file (writes past it fail cleanly; 1..2^24) max_message_bytes:
//   4194304 (one message's content, tool data included; 1..2^30)
#include "kernex/number.hpp"
#include "kernex/plugin.hpp"
#include "sqlite_store.hpp"

namespace {

using kernex::ErrorCode;
using kernex::Json;
using kernex::Result;

// Each option's range: past it a size overflows its byte count or a wait outlives any run.
Result<std::uint64_t> positive(const Json& config, const char* key, std::uint64_t max) {
  if (auto problem = kernex::uint_problem(config.at(key), 1, max))
    return kernex::fail(ErrorCode::Config,
                        std::string("sqlite memory: option '") + key + "': " + *problem);
  return config.at(key).get<std::uint64_t>();
}

Result<kernex::sqlite::StoreOptions> parse_options(const Json& config) {
  kernex::sqlite::StoreOptions out;
  if (config.is_null()) {
    return kernex::fail(ErrorCode::Config,
                        "sqlite memory: set option 'path' (the database file) or 'data_dir'");
  }
  if (!config.is_object())
    return kernex::fail(ErrorCode::Config, "sqlite memory: options must be a mapping");
  std::optional<std::string> path, data_dir;
  for (const auto& [key, value] : config.items()) {
    if (key == "path" || key == "data_dir") {
      if (!value.is_string() || value.get_ref<const std::string&>().empty()) {
        return kernex::fail(ErrorCode::Config,
                            "sqlite memory: option '" + key + "' must be a non-empty string");
      }
      (key == "path" ? path : data_dir) = value.get<std::string>();
    } else if (key == "busy_timeout_ms") {
      KERNEX_ASSIGN_OR_RETURN(auto v, positive(config, "busy_timeout_ms", 600'000));
      out.open.busy_timeout_ms = static_cast<int>(v);
    } else if (key == "synchronous") {
      const std::string s = value.is_string() ? value.get<std::string>() : "";
      if (s != "normal" && s != "full") {
        return kernex::fail(
            ErrorCode::Config,
            "sqlite memory: option 'synchronous' must be \"normal\" or \"full\", got " +
                value.dump());
      }
      out.open.synchronous = s == "full" ? "FULL" : "NORMAL";
    } else if (key == "max_size_mb") {
      KERNEX_ASSIGN_OR_RETURN(auto v, positive(config, "max_size_mb", 1ULL << 24));
      out.open.max_pages = static_cast<std::int64_t>(v * 1024 * 1024 / 4096);  // default page size
    } else if (key == "max_message_bytes") {
      KERNEX_ASSIGN_OR_RETURN(auto v, positive(config, "max_message_bytes", 1ULL << 30));
      out.max_message_bytes = v;
    } else {
      return kernex::fail(ErrorCode::Config,
                          "sqlite memory: unknown option '" + key +
                              "' (known: path, data_dir, busy_timeout_ms, synchronous, "
                              "max_size_mb, max_message_bytes)");
    }
  }
  if (path) {
    out.path = *path;
  } else if (data_dir) {
    out.path = std::filesystem::path(*data_dir) / "memory.db";
  } else {
    return kernex::fail(ErrorCode::Config,
                        "sqlite memory: set option 'path' (the database file) or 'data_dir'");
  }
  return out;
}

Result<std::shared_ptr<kernex::MemoryStore>> make_sqlite(const Json& config) {
  KERNEX_ASSIGN_OR_RETURN(auto options, parse_options(config));
  KERNEX_ASSIGN_OR_RETURN(auto store, kernex::sqlite::SqliteStore::open(options));
  return std::shared_ptr<kernex::MemoryStore>(store);
}

}  // namespace

KERNEX_PLUGIN(Memory, "sqlite", "1.0.0",
              "Embedded SQLite store: history, recall, facts, tasks, usage", make_sqlite)
