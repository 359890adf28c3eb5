#include "pg_run_stores.hpp"

#include "cluster_store.hpp"
#include "stored_json.hpp"

namespace kernex::server {
namespace {

using pg::Connection;
using pg::Rows;

// A journal write of a fenced journal goes through only while the claim holds.
constexpr const char* kHeld =
    "EXISTS (SELECT 1 FROM serve_runs WHERE id = $2 AND tenant = $1 AND node = $5 AND attempt = "
    "$6::int AND status = 'running')";

class PgJournal final : public RunJournal {
 public:
  PgJournal(pg::Pool& pool, pg::Writer& writer, std::string tenant, std::string run_id,
            std::string node, int attempt)
      : pool_(pool),
        writer_(writer),
        tenant_(std::move(tenant)),
        run_id_(std::move(run_id)),
        node_(std::move(node)),
        attempt_(attempt) {}

  Result<std::optional<Response>> response(std::uint32_t turn) override {
    KERNEX_ASSIGN_OR_RETURN(auto c, pool_.acquire());
    KERNEX_ASSIGN_OR_RETURN(
        auto r, c->exec("SELECT response FROM serve_run_responses WHERE tenant = $1 AND run_id = "
                        "$2 AND turn = $3::int",
                        {tenant_, run_id_, turn}));
    if (r.empty()) return std::nullopt;
    try {
      return parse_untrusted(r.text(0, 0)).get<Response>();
    } catch (const std::exception& e) {
      return fail(ErrorCode::Io, "serve run store: run " + run_id_ + " turn " +
                                     std::to_string(turn) + ": unreadable answer: " + e.what());
    }
  }

  Result<void> record_response(std::uint32_t turn, const Response& response) override {
    // The first answer recorded for a turn stands: a stalled node's later one is not kept.
    return write({{{std::string("INSERT INTO serve_run_responses (tenant, run_id, turn, "
                                "response) SELECT $1, $2, $3::int, $4 WHERE ") +
                        fence() + " ON CONFLICT (run_id, turn) DO NOTHING",
                    params({tenant_, run_id_, turn, stored_text(Json(response))})}},
                  {}});
  }

  Result<ToolEntry> tool(const std::string& key) override {
    KERNEX_ASSIGN_OR_RETURN(auto c, pool_.acquire());
    KERNEX_ASSIGN_OR_RETURN(auto r, c->exec("SELECT COALESCE(result, '') FROM serve_run_tools "
                                            "WHERE tenant = $1 AND run_id = $2 AND key = $3",
                                            {tenant_, run_id_, key}));
    ToolEntry entry;
    if (r.empty()) return entry;
    entry.started = true;
    const std::string text = r.text(0, 0);
    if (text.empty()) return entry;
    try {
      entry.result = parse_untrusted(text).get<ToolResult>();
    } catch (const std::exception&) {
      // Started, its result unreadable: reported as interrupted, never run again.
    }
    return entry;
  }

  // The start is a row only one writer can insert: a second start (a node that raced another
  // for the same call) is refused, so the tool is not run by it.
  Result<void> tool_started(const std::string& key, const ToolCall& call) override {
    auto started = [this, key](const std::vector<pg::Rows>& rows) -> Result<bool> {
      if (!rows.empty() && rows[0].affected() != 1)
        return fail(ErrorCode::Cancelled, "run " + run_id_ + ": call " + key +
                                              " was started elsewhere, or this node no longer "
                                              "holds the run");
      return true;
    };
    return write({{{std::string("INSERT INTO serve_run_tools (tenant, run_id, key, call) "
                                "SELECT $1, $2, $3, $4 WHERE ") +
                        fence() + " ON CONFLICT (run_id, key) DO NOTHING",
                    params({tenant_, run_id_, key, stored_text(Json(call))})}},
                  started});
  }

  Result<void> tool_finished(const std::string& key, const ToolResult& result) override {
    // Kept whoever ran it: the tool did run, and its result is what a resumed run should see.
    return write({{{"UPDATE serve_run_tools SET result = $4 WHERE tenant = $1 AND run_id = $2 AND "
                    "key = $3 AND result IS NULL",
                    {tenant_, run_id_, key, stored_text(Json(result))}}},
                  {}});
  }

 private:
  Result<void> write(const pg::Write& w) { return writer_.write(w); }
  std::string fence() const { return node_.empty() ? "true" : kHeld; }
  std::vector<pg::Param> params(std::vector<pg::Param> p) const {
    if (!node_.empty()) {
      p.emplace_back(node_);
      p.emplace_back(attempt_);
    }
    return p;
  }

  pg::Pool& pool_;
  pg::Writer& writer_;
  const std::string tenant_, run_id_, node_;
  const int attempt_;
};

constexpr const char* kPgApprovalColumns =
    "id, tenant, session, run_id, key, tool, reason, status, decision, decision_reason, "
    "arguments, edited_arguments, created_at, expires_at, resolved_at";

StoredApproval read_approval_row(const Rows& r, int row) {
  using A = StoredApproval;
  A a;
  int col = 0;
  for (auto text : {&A::id, &A::tenant, &A::session, &A::run_id, &A::key, &A::tool, &A::reason,
                    &A::status, &A::decision, &A::decision_reason})
    a.*text = r.text(row, col++);
  a.arguments = parse_untrusted(r.text(row, col++));
  if (!a.arguments.is_object()) a.arguments = Json::object();
  if (Json edited = parse_untrusted(r.text(row, col++)); edited.is_object())
    a.edited_arguments = std::move(edited);
  for (auto time : {&A::created_at, &A::expires_at, &A::resolved_at}) a.*time = r.int64(row, col++);
  return a;
}

}  // namespace

std::shared_ptr<RunJournal> PgJournalStore::journal(const std::string& tenant,
                                                    const std::string& run_id, bool) {
  return std::make_shared<PgJournal>(pool_, *writer_, tenant, run_id, "", 0);
}

std::shared_ptr<RunJournal> PgJournalStore::journal(const std::string& tenant,
                                                    const std::string& run_id,
                                                    const std::string& node, int attempt) {
  return std::make_shared<PgJournal>(pool_, *writer_, tenant, run_id, node, attempt);
}

Result<void> PgJournalStore::forget(const std::string& tenant, const std::string& run_id) {
  // One write of the run path's batches.
  return writer_->write(
      {{{"DELETE FROM serve_run_responses WHERE tenant = $1 AND run_id = $2", {tenant, run_id}},
        {"DELETE FROM serve_run_tools WHERE tenant = $1 AND run_id = $2", {tenant, run_id}}},
       {}});
}

Result<std::int64_t> PgApprovalStore::now() {
  KERNEX_ASSIGN_OR_RETURN(auto c, pool_.acquire());
  KERNEX_ASSIGN_OR_RETURN(auto r, c->exec(std::string("SELECT ") + ClusterStore::kEpochNow));
  return r.int64(0, 0);
}

Result<StoredApproval> PgApprovalStore::insert(const StoredApproval& a) {
  // Its times on the database's clock: every node judges the expiry alike. One write of the run
  // path's batches; a second row for the same (run, key) fails alone, as its own transaction did.
  const std::int64_t timeout = std::max<std::int64_t>(0, a.expires_at - a.created_at);
  auto times = std::make_shared<std::pair<std::int64_t, std::int64_t>>();  // the writer's thread
  KERNEX_RETURN_IF_ERROR(writer_->write(
      {{{std::string("INSERT INTO serve_approvals (id, tenant, session, run_id, key, tool, "
                     "arguments, reason, status, created_at, expires_at) SELECT $1, $2, $3, "
                     "$4, $5, $6, $7, $8, 'pending', n, n + $9::bigint FROM (SELECT ") +
             ClusterStore::kEpochNow + " AS n) t RETURNING created_at, expires_at",
         {a.id, a.tenant, a.session, a.run_id, a.key, a.tool, stored_text(a.arguments), a.reason,
          timeout}}},
       [times](const std::vector<pg::Rows>& rows) -> Result<bool> {
         if (!rows.empty() && !rows[0].empty()) *times = {rows[0].int64(0, 0), rows[0].int64(0, 1)};
         return true;
       }}));
  StoredApproval stored = a;
  stored.created_at = times->first;
  stored.expires_at = times->second;
  return stored;
}

Result<std::vector<StoredApproval>> PgApprovalStore::select(const std::string& where,
                                                            const std::vector<pg::Param>& params) {
  KERNEX_ASSIGN_OR_RETURN(auto c, pool_.acquire());
  KERNEX_ASSIGN_OR_RETURN(
      auto r, c->exec(std::string("SELECT ") + kPgApprovalColumns + " FROM serve_approvals WHERE " +
                          where + " ORDER BY seq",
                      params));
  std::vector<StoredApproval> out;
  for (int i = 0; i < r.size(); ++i) out.push_back(read_approval_row(r, i));
  return out;
}

Result<std::optional<StoredApproval>> PgApprovalStore::by_id(const std::string& tenant,
                                                             const std::string& id) {
  KERNEX_ASSIGN_OR_RETURN(auto rows, select("tenant = $1 AND id = $2", {tenant, id}));
  if (rows.empty()) return std::nullopt;
  return rows.front();
}

Result<std::optional<StoredApproval>> PgApprovalStore::by_key(const std::string& tenant,
                                                              const std::string& run_id,
                                                              const std::string& key) {
  KERNEX_ASSIGN_OR_RETURN(
      auto rows, select("tenant = $1 AND run_id = $2 AND key = $3", {tenant, run_id, key}));
  if (rows.empty()) return std::nullopt;
  return rows.front();
}

Result<std::vector<StoredApproval>> PgApprovalStore::pending(const std::string& tenant,
                                                             const std::string& session) {
  return select("tenant = $1 AND session = $2 AND status = 'pending'", {tenant, session});
}

// One write of the run path's batches. The run's row first, as release() locks it: a run stopping
// to wait and a decision arriving meanwhile are ordered, so the run is queued again by whichever
// comes second. A decision that found its approval no longer pending is undone (nothing queued,
// nothing told) and answers false.
Result<bool> PgApprovalStore::resolve(const StoredApproval& a) {
  pg::Write w;
  w.statements.push_back(
      {"SELECT 1 FROM serve_runs WHERE id = $1 AND tenant = $2 FOR UPDATE", {a.run_id, a.tenant}});
  w.statements.push_back(
      {std::string("UPDATE serve_approvals SET status = $3, decision = $4, "
                   "edited_arguments = $5, decision_reason = $6, resolved_at = ") +
           ClusterStore::kEpochNow +
           " WHERE id = $1 AND tenant = $2 AND status = 'pending' AND ($3 = 'expired' OR "
           "expires_at > " +
           ClusterStore::kEpochNow + ")",
       {a.id, a.tenant, a.status, a.decision,
        a.edited_arguments ? stored_text(*a.edited_arguments) : std::string(), a.decision_reason}});
  w.statements.push_back(requeue_statement(a.run_id));
  // A run that waits in its thread (a call inside REPL code) hears of it on its node.
  w.statements.push_back({"SELECT pg_notify($1, $2)", {ClusterStore::kApprovalsChannel, a.run_id}});
  auto decided = std::make_shared<bool>(false);  // set on the writer's thread
  w.check = [decided](const std::vector<pg::Rows>& rows) -> Result<bool> {
    *decided = rows.size() > 1 && rows[1].affected() == 1;
    return *decided;
  };
  KERNEX_RETURN_IF_ERROR(writer_->write(w));
  return *decided;
}

Result<bool> PgApprovalStore::granted(const std::string& tenant, const std::string& session,
                                      const std::string& tool) {
  KERNEX_ASSIGN_OR_RETURN(auto c, pool_.acquire());
  KERNEX_ASSIGN_OR_RETURN(auto r, c->exec("SELECT 1 FROM serve_approval_grants WHERE tenant = $1 "
                                          "AND session = $2 AND tool = $3",
                                          {tenant, session, tool}));
  return !r.empty();
}

Result<void> PgApprovalStore::grant(const std::string& tenant, const std::string& session,
                                    const std::string& tool) {
  return writer_->write(
      {{{"INSERT INTO serve_approval_grants (tenant, session, tool) VALUES ($1, $2, $3) ON "
         "CONFLICT DO NOTHING",
         {tenant, session, tool}}},
       {}});
}

Result<void> PgApprovalStore::delete_session(const std::string& tenant,
                                             const std::string& session) {
  KERNEX_RETURN_IF_ERROR(pool_.transaction<bool>([&](Connection& c) -> Result<bool> {
    for (const char* sql : {"DELETE FROM serve_approvals WHERE tenant = $1 AND session = $2",
                            "DELETE FROM serve_approval_grants WHERE tenant = $1 AND session = $2"})
      KERNEX_RETURN_IF_ERROR(c.exec(sql, {tenant, session}));
    return true;
  }));
  return {};
}

}  // namespace kernex::server
