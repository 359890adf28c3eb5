#include "store_bare.hpp"

#include <libpq-fe.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <cstdio>

#include "bench_util.hpp"

namespace kernex::bench {
namespace {

[[noreturn]] void die(const std::string& what) { kernex::bench::die("store", what); }

struct Statement {
  const char* name;
  const char* sql;
};

// The turn's reads in build_context's order, then the writes. Parameters are text, as the store
// sends them.
constexpr Statement kStatements[] = {
    {"open_conversation",
     "SELECT id FROM conversations WHERE channel = $1 AND sender_id = $2 AND project = $3 AND "
     "status = 'active' "
     "AND last_activity > kx_time(now() AT TIME ZONE 'UTC' - make_interval(mins => $4::int)) "
     "ORDER BY last_activity DESC, rid DESC LIMIT 1"},
    {"recent_messages",
     "SELECT seq, role, content, tool_calls, tool_result, provider_state FROM messages "
     "WHERE conversation_id = $1 ORDER BY seq DESC LIMIT $2::bigint"},
    {"message_count", "SELECT message_count FROM conversations WHERE id = $1"},
    {"facts",
     "SELECT key, value FROM facts WHERE sender_id = $1 AND deleted_at IS NULL ORDER BY key "
     "COLLATE \"C\""},
    {"recent_summaries",
     "SELECT s.conversation_id, s.text, s.covered_messages, s.updated_at FROM summaries s "
     "JOIN conversations c ON c.id = s.conversation_id WHERE c.channel = $1 AND c.sender_id = $2 "
     "AND s.conversation_id <> $3 ORDER BY s.updated_at DESC, s.id DESC LIMIT $4::bigint"},
    {"recall_boundary",
     "SELECT seq FROM messages WHERE conversation_id = $1 ORDER BY seq DESC LIMIT 1 OFFSET "
     "$2::bigint"},
    {"pending_tasks",
     "SELECT id, channel, sender_id, reply_target, description, due_at, repeat, task_type, "
     "project, max_retries, "
     "status, retry_count, last_error, claimed_by, lease_until, created_at FROM scheduled_tasks "
     "WHERE sender_id = $1 AND status = 'pending' ORDER BY due_at, rid"},
    {"lessons",
     "SELECT sender_id, domain, rule, project, occurrences, updated_at FROM lessons WHERE "
     "sender_id = $1 AND "
     "(project = '' OR project = $2) ORDER BY (project = $2 AND project <> '') DESC, recency DESC, "
     "id DESC LIMIT $3::bigint"},
    {"recent_outcomes",
     "SELECT sender_id, domain, score, lesson, source, project, created_at FROM outcomes WHERE "
     "sender_id = $1 "
     "AND ($2::text IS NULL OR project = $2) ORDER BY id DESC LIMIT $3::bigint"},
    {"compaction_summary",
     "SELECT text, covered_messages FROM summaries WHERE conversation_id = $1"},
    {"touch_conversation",
     "UPDATE conversations SET last_activity = kx_now(), message_count = message_count + "
     "$1::bigint WHERE id = $2"},
    {"insert_message",
     "INSERT INTO messages (conversation_id, role, content, tool_calls, tool_result, "
     "provider_state) "
     "VALUES ($1, $2, $3, $4, $5, $6)"},
    {"insert_usage",
     "INSERT INTO token_usage (conversation_id, sender_id, model, provider, input_tokens, "
     "output_tokens, "
     "cache_read_tokens, cache_write_tokens, cost_usd) VALUES ($1, $2, $3, $4, $5::bigint, "
     "$6::bigint, $7::bigint, "
     "$8::bigint, $9::double precision)"},
    // The store's own claim statement (tasks.cpp), prepared: where its time goes, beside the bare
    // one.
    {"claim_store_statement",
     "WITH pending AS (SELECT id, due_at AS at, rid FROM scheduled_tasks WHERE status = 'pending' "
     "AND due_at <= kx_now() AND retry_at IS NULL ORDER BY due_at, rid LIMIT $3::bigint FOR UPDATE "
     "SKIP LOCKED), "
     "retries AS (SELECT id, retry_at AS at, rid FROM scheduled_tasks WHERE status = 'pending' "
     "AND retry_at <= kx_now() ORDER BY retry_at, rid LIMIT $3::bigint FOR UPDATE SKIP LOCKED), "
     "expired AS (SELECT id, coalesce(retry_at, due_at) AS at, rid FROM scheduled_tasks WHERE "
     "status = 'claimed' "
     "AND lease_until <= kx_now() ORDER BY due_at, rid LIMIT $3::bigint FOR UPDATE SKIP LOCKED), "
     "due AS (SELECT id AS due_id FROM (SELECT * FROM pending UNION ALL SELECT * FROM retries "
     "UNION ALL SELECT * FROM expired) all_kinds ORDER BY at, rid LIMIT $3::bigint) "
     "UPDATE scheduled_tasks SET status = 'claimed', claimed_by = $1, "
     "lease_until = kx_time(now() AT TIME ZONE 'UTC' + make_interval(secs => $2::bigint)) "
     "FROM due WHERE id = due_id RETURNING id, channel, sender_id, reply_target, description, "
     "due_at, repeat, "
     "task_type, project, max_retries, status, retry_count, last_error, claimed_by, lease_until, "
     "created_at"},
    // The brief's bare claim: one row, the oldest due, skipped when another claimer holds it.
    {"claim_one",
     "UPDATE scheduled_tasks SET status = 'claimed', claimed_by = $1, "
     "lease_until = kx_time(now() AT TIME ZONE 'UTC' + make_interval(secs => $2::bigint)) "
     "WHERE id = (SELECT id FROM scheduled_tasks WHERE status = 'pending' AND due_at <= kx_now() "
     "ORDER BY due_at FOR UPDATE SKIP LOCKED LIMIT 1) "
     "RETURNING id, channel, sender_id, reply_target, description, due_at, repeat, task_type, "
     "project, max_retries, "
     "status, retry_count, last_error, claimed_by, lease_until, created_at"},
};

// The store's recall over `words` words (one phraseto_tsquery each, AND-ed), messages then
// summaries.
std::string tsquery(std::size_t words, int first) {
  std::string sql = "(";
  for (std::size_t i = 0; i < words; ++i) {
    if (i > 0) sql += " && ";
    sql += "phraseto_tsquery('simple', $" + std::to_string(first + static_cast<int>(i)) + "::text)";
  }
  return sql + ")";
}

std::string recall_messages_sql(std::size_t words) {
  const std::string v = "to_tsvector('simple'::regconfig, left(m.content, 200000))",
                    q = tsquery(words, 6);
  return "SELECT m.conversation_id, m.seq, m.content, m.created_at, -ts_rank(" + v + ", " + q +
         ") FROM messages m JOIN conversations c ON c.id = m.conversation_id WHERE m.role = 'user' "
         "AND " +
         v + " @@ " + q +
         " AND ($1 = '' OR c.sender_id = $1) AND (m.conversation_id <> $2 OR m.seq < $3::bigint) "
         "AND ($4::text IS NULL OR m.created_at >= $4) ORDER BY 5, m.seq DESC LIMIT $5::bigint";
}

std::string recall_summaries_sql(std::size_t words) {
  const std::string v = "to_tsvector('simple'::regconfig, left(s.text, 200000))",
                    q = tsquery(words, 6);
  return "SELECT s.conversation_id, s.text, s.updated_at, -ts_rank(" + v + ", " + q +
         ") FROM summaries s JOIN conversations c ON c.id = s.conversation_id WHERE " + v + " @@ " +
         q +
         " AND ($1 = '' OR c.sender_id = $1) AND s.conversation_id <> $2 AND $3::bigint IS NOT "
         "NULL "
         "AND ($4::text IS NULL OR s.updated_at >= $4) ORDER BY 4, s.id DESC LIMIT $5::bigint";
}

}  // namespace

namespace {

// Each statement's text by name, for the unprepared mode (PQexecParams, as the store sends them).
std::map<std::string, std::string> g_sql;
bool g_prepared = true;

PGresult* exec(pg_conn* conn, const char* name, const std::vector<const char*>& values) {
  const int n = static_cast<int>(values.size());
  if (g_prepared) return PQexecPrepared(conn, name, n, values.data(), nullptr, nullptr, 0);
  return PQexecParams(conn, g_sql.at(name).c_str(), n, nullptr, values.data(), nullptr, nullptr, 0);
}

void prepare(pg_conn* conn, const char* name, const std::string& sql) {
  g_sql[name] = sql;
  PGresult* r = PQprepare(conn, name, sql.c_str(), 0, nullptr);
  if (PQresultStatus(r) != PGRES_COMMAND_OK)
    die(std::string("preparing ") + name + ": " + PQresultErrorMessage(r));
  PQclear(r);
}

}  // namespace

BarePg::BarePg(const std::string& dsn, std::size_t recall_words) : conn_(PQconnectdb(dsn.c_str())) {
  if (PQstatus(conn_) != CONNECTION_OK)
    die(std::string("bare connection: ") + PQerrorMessage(conn_));
  for (const auto& s : kStatements) prepare(conn_, s.name, s.sql);
  prepare(conn_, "recall_messages", recall_messages_sql(recall_words));
  prepare(conn_, "recall_summaries", recall_summaries_sql(recall_words));
}

BarePg::~BarePg() { PQfinish(conn_); }

namespace {

// Runs a prepared statement and touches every cell, as a real caller would; returns the bytes read.
using Params = std::vector<std::optional<std::string>>;  // nullopt: NULL

// Time spent per statement, for the breakdown the bench prints.
std::map<std::string, std::pair<double, int>> g_spent;

std::size_t run(pg_conn* conn, const char* name, const Params& params, bool rows = true) {
  const auto t0 = Clock::now();
  struct Tally {
    const char* name;
    Clock::time_point t0;
    ~Tally() {
      if (g_prepared) g_spent[name].first += us_since(t0), ++g_spent[name].second;
    }
  } tally{name, t0};
  std::vector<const char*> values;
  for (const auto& p : params) values.push_back(p ? p->c_str() : nullptr);
  PGresult* r = exec(conn, name, values);
  const auto status = PQresultStatus(r);
  if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
    die(std::string(name) + ": " + PQresultErrorMessage(r));
  }
  std::size_t bytes = 0;
  if (rows) {
    for (int row = 0; row < PQntuples(r); ++row) {
      for (int col = 0; col < PQnfields(r); ++col)
        bytes += static_cast<std::size_t>(PQgetlength(r, row, col));
    }
  }
  PQclear(r);
  return bytes;
}

void command(pg_conn* conn, const char* sql) {
  PGresult* r = PQexec(conn, sql);
  if (PQresultStatus(r) != PGRES_COMMAND_OK) die(std::string(sql) + ": " + PQresultErrorMessage(r));
  PQclear(r);
}

std::string first_value(pg_conn* conn, const char* name, const Params& params) {
  std::vector<const char*> values;
  for (const auto& p : params) values.push_back(p ? p->c_str() : nullptr);
  PGresult* r = exec(conn, name, values);
  if (PQresultStatus(r) != PGRES_TUPLES_OK) die(std::string(name) + ": " + PQresultErrorMessage(r));
  std::string out = PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "";
  PQclear(r);
  return out;
}

}  // namespace

std::size_t BarePg::context_build(const BareTurn& t) {
  const std::string conv = first_value(
      conn_, "open_conversation", {t.channel, t.sender, t.project, std::to_string(t.idle_minutes)});
  if (conv.empty()) die("bare: no active conversation");
  std::size_t bytes = conv.size();
  bytes += run(conn_, "recent_messages", {conv, std::to_string(t.history)});
  bytes += run(conn_, "message_count", {conv});
  bytes += run(conn_, "facts", {t.sender});
  bytes += run(conn_, "recent_summaries", {t.channel, t.sender, conv, "3"});
  const std::string boundary =
      first_value(conn_, "recall_boundary", {conv, std::to_string(t.history - 1)});
  Params recall{t.sender, conv, boundary.empty() ? "0" : boundary, std::nullopt,
                std::to_string(t.recall_limit)};
  recall.insert(recall.end(), t.recall_words.begin(), t.recall_words.end());
  bytes += run(conn_, "recall_messages", recall);
  bytes += run(conn_, "recall_summaries", recall);
  bytes += run(conn_, "pending_tasks", {t.sender});
  bytes += run(conn_, "lessons", {t.sender, t.project, std::to_string(t.lessons)});
  // The context builder asks for every project's outcomes when the key's project is "".
  const std::optional<std::string> project =
      t.project.empty() ? std::nullopt : std::optional(t.project);
  bytes += run(conn_, "recent_outcomes", {t.sender, project, std::to_string(t.outcomes)});
  bytes += run(conn_, "compaction_summary", {conv});
  return bytes;
}

void BarePg::save_exchange(const std::string& conversation, const std::string& sender,
                           const std::string& user, const std::string& assistant) {
  command(conn_, "BEGIN");
  run(conn_, "touch_conversation", {"2", conversation}, false);
  run(conn_, "insert_message",
      {conversation, "user", user, std::nullopt, std::nullopt, std::nullopt}, false);
  run(conn_, "insert_message",
      {conversation, "assistant", assistant, std::nullopt, std::nullopt, std::nullopt}, false);
  run(conn_, "insert_usage",
      {conversation, sender, "bench-model", "bench", "120", "30", "0", "0", "0.0001"}, false);
  command(conn_, "COMMIT");
}

bool BarePg::claim_one(const std::string& worker, int lease_s) {
  return run(conn_, "claim_one", {worker, std::to_string(lease_s)}) > 0;
}

bool BarePg::claim_store_statement(const std::string& worker, int lease_s) {
  return run(conn_, "claim_store_statement", {worker, std::to_string(lease_s), "1"}) > 0;
}

void BarePg::set_prepared(bool prepared) { g_prepared = prepared; }

std::string BarePg::breakdown() const {
  std::string out;
  for (const auto& [name, spent] : g_spent) {
    char line[128];
    std::snprintf(line, sizeof line, "    %-20s %8.1f us\n", name.c_str(),
                  spent.first / spent.second);
    out += line;
  }
  return out;
}

}  // namespace kernex::bench
