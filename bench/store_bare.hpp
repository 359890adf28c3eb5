// bench/store's baseline: the SQL statements the postgres memory store runs for one turn, a saved
// exchange and a task claim, prepared once and issued directly with libpq on one connection, with
// nothing around them (no pool, no Result, no row decoding beyond touching every cell). libpq
// stays in store_bare.cpp.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

struct pg_conn;

namespace kernex::bench {

// What one turn's context build asks for (build_context with every ContextNeeds part on).
struct BareTurn {
  std::string channel, sender, project;
  int idle_minutes = 120;
  int history = 50;  // recent messages window
  std::vector<std::string>
      recall_words;  // the request's significant words, as the store picks them
  int recall_limit = 5;
  int outcomes = 15;
  int lessons = 10;
};

class BarePg {
 public:
  // Dies (bench::die) when it cannot connect or prepare; recall is prepared for `recall_words`
  // words.
  BarePg(const std::string& dsn, std::size_t recall_words);
  ~BarePg();
  BarePg(const BarePg&) = delete;
  BarePg& operator=(const BarePg&) = delete;

  // Every statement a turn runs, in build_context's order; returns the bytes read (never 0).
  std::size_t context_build(const BareTurn& turn);
  // One transaction: touch the conversation, insert the user and assistant rows, the usage row.
  void save_exchange(const std::string& conversation, const std::string& sender,
                     const std::string& user, const std::string& assistant);
  // UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1); false when none was due.
  bool claim_one(const std::string& worker, int lease_s);
  // The store's own claim statement (due or lease-expired, one), prepared, for the breakdown.
  bool claim_store_statement(const std::string& worker, int lease_s);
  // false: every statement goes as PQexecParams with its text (parsed and planned each time), as
  // the store's pg::Connection sends them; true (the default): prepared once.
  void set_prepared(bool prepared);
  // Mean time per statement so far, one line each (open_conversation and recall_boundary excluded).
  std::string breakdown() const;

 private:
  pg_conn* conn_ = nullptr;
};

}  // namespace kernex::bench
