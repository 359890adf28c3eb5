// A bench's own PostgreSQL database on the server KERNEX_BENCH_PG_DSN (or else KERNEX_TEST_PG_DSN)
// names: created fresh, dropped by the destructor and, should the bench die (std::exit), at exit.
#pragma once

#include <libpq-fe.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <string>

#include "bench_util.hpp"

namespace kernex::bench {

class PgBenchDb {
 public:
  // Dies naming the variables when neither is set, or when CREATE DATABASE fails.
  PgBenchDb(const char* bench, const std::string& tag) {
    const char* env = std::getenv("KERNEX_BENCH_PG_DSN");
    if (!env || !*env) env = std::getenv("KERNEX_TEST_PG_DSN");
    if (!env || !*env) {
      die(bench,
          "set KERNEX_BENCH_PG_DSN (or KERNEX_TEST_PG_DSN) to a PostgreSQL server where the bench "
          "may "
          "CREATE DATABASE (scripts/pg-cluster start DIR prints one)");
    }
    server_ = env;
    name_ = "kx_bench_" + tag + "_" + std::to_string(::getpid());
    if (auto error = admin(server_, "CREATE DATABASE " + name_); !error.empty()) die(bench, error);
    live().insert({server_, name_});
    static const bool registered = (std::atexit(drop_all), true);
    (void)registered;
  }
  ~PgBenchDb() {
    admin(server_, "DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)");
    live().erase({server_, name_});
  }
  PgBenchDb(const PgBenchDb&) = delete;
  PgBenchDb& operator=(const PgBenchDb&) = delete;

  // A later keyword wins in a libpq conninfo string, so the server's DSN plus dbname names ours.
  std::string dsn() const { return server_ + " dbname=" + name_; }
  const std::string& name() const { return name_; }
  const std::string& server_dsn() const { return server_; }

 private:
  // "" on success, else the error.
  static std::string admin(const std::string& dsn, const std::string& sql) {
    PGconn* c = PQconnectdb(dsn.c_str());
    std::string error;
    if (PQstatus(c) != CONNECTION_OK) {
      error = std::string("connecting to ") + dsn + ": " + PQerrorMessage(c);
    } else {
      PGresult* r = PQexec(c, sql.c_str());
      if (PQresultStatus(r) != PGRES_COMMAND_OK) error = sql + ": " + PQresultErrorMessage(r);
      PQclear(r);
    }
    PQfinish(c);
    return error;
  }
  static std::set<std::pair<std::string, std::string>>& live() {
    static std::set<std::pair<std::string, std::string>> dbs;
    return dbs;
  }
  static void drop_all() {
    for (const auto& [server, name] : live())
      admin(server, "DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
  }

  std::string server_, name_;
};

}  // namespace kernex::bench
