// A fresh PostgreSQL database per test, on the throwaway cluster scripts/test starts
// (scripts/pg-cluster): KERNEX_TEST_PG_DSN names a server where the tests may CREATE DATABASE.
// Without it a test skips and says why, unless KERNEX_REQUIRE_PG=1 (scripts/test and CI set it):
// then it fails, so a suite that needs PostgreSQL never passes silently without one.
#pragma once

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <cstdlib>
#include <random>
#include <string>

namespace kernex::testing {

class PgTestDb {
 public:
  // Empty dsn(): the test must return (GTEST_SKIP or a failure was recorded).
  PgTestDb() {
    const char* server = std::getenv("KERNEX_TEST_PG_DSN");
    if (!server || !*server) {
      const char* required = std::getenv("KERNEX_REQUIRE_PG");
      if (required && std::string(required) == "1") {
        ADD_FAILURE() << "KERNEX_TEST_PG_DSN is not set but KERNEX_REQUIRE_PG=1: start a cluster "
                         "with scripts/pg-cluster";
      }
      return;
    }
    server_ = server;
    std::random_device rd;
    name_ = "kx_test_" + std::to_string(rd()) + "_" + std::to_string(rd());
    if (!admin("CREATE DATABASE " + name_)) return;
    dsn_ = server_ + " dbname=" + name_;
  }
  ~PgTestDb() {
    if (!dsn_.empty()) admin("DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)");
  }
  PgTestDb(const PgTestDb&) = delete;
  PgTestDb& operator=(const PgTestDb&) = delete;

  const std::string& dsn() const { return dsn_; }
  const std::string& name() const { return name_; }
  static bool available() {
    const char* server = std::getenv("KERNEX_TEST_PG_DSN");
    return server && *server;
  }
  static std::string skip_reason() {
    return "KERNEX_TEST_PG_DSN is not set (no PostgreSQL server to test against; scripts/test "
           "starts one)";
  }

  // Runs one statement on the test database (setup and inspection in tests).
  bool exec(const std::string& sql, std::string* first_value = nullptr) const {
    return run(dsn_, sql, first_value);
  }

 private:
  bool admin(const std::string& sql) const { return run(server_, sql, nullptr); }
  static bool run(const std::string& dsn, const std::string& sql, std::string* first_value) {
    PGconn* c = PQconnectdb(dsn.c_str());
    bool ok = PQstatus(c) == CONNECTION_OK;
    if (!ok) ADD_FAILURE() << "PostgreSQL: " << PQerrorMessage(c);
    if (ok) {
      PGresult* r = PQexec(c, sql.c_str());
      const auto st = PQresultStatus(r);
      ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
      if (!ok) ADD_FAILURE() << sql << ": " << PQresultErrorMessage(r);
      if (ok && first_value && PQntuples(r) > 0) *first_value = PQgetvalue(r, 0, 0);
      PQclear(r);
    }
    PQfinish(c);
    return ok;
  }

  std::string server_, name_, dsn_;
};

}  // namespace kernex::testing
