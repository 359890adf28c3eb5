// The SQL a store runs, recorded with its bound values and replayed on a connection of one's own,
// each statement prepared once: the store's statements at SQLite's own cost, without the store
// (bench/turn's `memory-floor`). Recording covers every connection this process opens to files
// whose name ends with a given suffix (sqlite3_auto_extension installs a trace on each); a
// statement is kept as its text with `?` parameters and the values sqlite3_expanded_sql shows for
// them. Statements run by triggers are left out: replaying the statement runs them again.
// Connections opened while it is installed keep their trace until they close.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace kernex::bench {

using SqlValue = std::variant<std::monostate, std::int64_t, double, std::string>;

struct RecordedStatement {
  std::string sql;                             // as prepared, with its parameters
  std::vector<std::pair<int, SqlValue>> args;  // (parameter index, value), in text order
  const void* connection = nullptr;            // the sqlite3* that ran it (recorded, not replayed)
};

// Installs the trace on the connections opened from now on (until remove_sql_recorder) and
// records the statements of those to files ending with `suffix` while recording.
void install_sql_recorder(const std::string& suffix);
void remove_sql_recorder();
void start_recording();
std::vector<RecordedStatement> stop_recording();

// Splits sqlite3_expanded_sql's text against the statement's own: the value of every parameter.
// Fails (false) when the texts do not line up.
bool parse_expanded(const std::string& sql, const std::string& expanded,
                    std::vector<std::pair<int, SqlValue>>& args);

// A recorded statement beside its prepared statement, looked up before a timed replay.
struct PreparedStatement {
  sqlite3_stmt* stmt;
  const RecordedStatement* recorded;  // outlives this
};

// Runs recorded statements on `db`, each text prepared once and kept.
class SqlReplayer {
 public:
  explicit SqlReplayer(sqlite3* db) : db_(db) {}
  ~SqlReplayer();
  SqlReplayer(const SqlReplayer&) = delete;
  SqlReplayer& operator=(const SqlReplayer&) = delete;
  // The statement prepared (once per text); dies naming it when SQLite refuses it.
  PreparedStatement prepare(const RecordedStatement& s);
  // Binds the recorded values and steps the statement to its end; dies naming it when SQLite
  // fails. The first form looks the text up; the second was looked up already.
  void run(const RecordedStatement& s) { run(prepare(s)); }
  void run(const PreparedStatement& p);

 private:
  sqlite3* db_;
  std::map<std::string, sqlite3_stmt*> prepared_;
};

}  // namespace kernex::bench
