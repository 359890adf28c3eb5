// Lessons (learned rules, at most 10 per sender + domain + project) and outcomes.
#include "pg_store.hpp"
#include "text_rules.hpp"

namespace kernex::postgres {
namespace {
constexpr std::int64_t kLessonsPerDomain = 10;
constexpr std::int64_t kLessonsListed = 50;

bool bad_text(const std::string& s) {
  return sqlite::invalid_utf8_at(s) || s.find('\0') != std::string::npos;
}
}  // namespace

Result<void> PgStore::store_lesson(const MemoryScope& scope, const Lesson& l) {
  if (l.domain.empty() || l.rule.empty()) {
    return fail(ErrorCode::Usage, "postgres memory: a lesson needs a domain and a rule");
  }
  if (bad_text(l.rule) || bad_text(l.domain) || bad_text(l.project) || bad_text(l.sender_id)) {
    return fail(ErrorCode::Parse, "postgres memory: the lesson is not valid UTF-8 text");
  }
  // One write of the writer's batches. One writer per sender + domain + project at a time (the
  // lock, held to the batch's commit), so the cap holds under concurrency. Repeating a rule
  // reinforces it (and moves it to the front) instead of adding a copy: the INSERT finds the
  // reinforced row and adds nothing, and the trim then keeps what it kept.
  pg::Write w;
  w.statements.push_back(
      {"SELECT pg_advisory_xact_lock(hashtextextended('lesson' || chr(31) || $4 || chr(31) || $1 "
       "|| chr(31) || $2 || chr(31) || $3, 0))",
       {l.sender_id, l.domain, l.project, scope.tenant()}});
  w.statements.push_back(
      {"UPDATE lessons SET occurrences = occurrences + 1, updated_at = kx_now(), "
       "recency = (SELECT coalesce(max(recency), 0) + 1 FROM lessons) "
       "WHERE tenant = $5 AND sender_id = $1 AND domain = $2 AND project = $3 AND rule = $4",
       {l.sender_id, l.domain, l.project, l.rule, scope.tenant()}});
  w.statements.push_back(
      {"INSERT INTO lessons (sender_id, domain, rule, project, recency, tenant) "
       "SELECT $1, $2, $3, $4, (SELECT coalesce(max(recency), 0) + 1 FROM lessons), $5 "
       "WHERE NOT EXISTS (SELECT 1 FROM lessons WHERE tenant = $5 AND sender_id = $1 AND domain = "
       "$2 AND project = $4 AND rule = $3)",
       {l.sender_id, l.domain, l.rule, l.project, scope.tenant()}});
  w.statements.push_back(
      {"DELETE FROM lessons WHERE tenant = $5 AND sender_id = $1 AND domain = $2 AND project = $3 "
       "AND id NOT IN (SELECT id FROM lessons WHERE tenant = $5 AND sender_id = $1 AND domain = "
       "$2 AND project = $3 ORDER BY recency DESC, id DESC LIMIT $4::bigint)",
       {l.sender_id, l.domain, l.project, kLessonsPerDomain, scope.tenant()}});
  return write(w);
}

Result<std::vector<Lesson>> PgStore::lessons(const MemoryScope& scope, const std::string& sender_id,
                                             const std::optional<std::string>& project) {
  KERNEX_ASSIGN_OR_RETURN(
      auto rows,
      query(
          "SELECT sender_id, domain, rule, project, occurrences, updated_at FROM lessons WHERE "
          "tenant = $4 AND sender_id = $1 AND "
          "(project = '' OR project = $2) ORDER BY (project = $2 AND project <> '') DESC, recency "
          "DESC, id DESC "
          "LIMIT $3::bigint",
          {sender_id, project.value_or(""), kLessonsListed, scope.tenant()}));
  std::vector<Lesson> out;
  for (int i = 0; i < rows.size(); ++i) {
    out.push_back({rows.text(i, 0), rows.text(i, 1), rows.text(i, 2), rows.text(i, 3),
                   static_cast<std::uint32_t>(rows.int64(i, 4)), rows.text(i, 5)});
  }
  return out;
}

Result<void> PgStore::store_outcome(const MemoryScope& scope, const OutcomeRecord& o) {
  if (o.score < -1 || o.score > 1) {
    return fail(ErrorCode::Usage, "postgres memory: an outcome's score must be -1, 0 or 1, got " +
                                      std::to_string(o.score));
  }
  if (bad_text(o.lesson) || bad_text(o.domain) || bad_text(o.source) || bad_text(o.project) ||
      bad_text(o.sender_id)) {
    return fail(ErrorCode::Parse, "postgres memory: the outcome is not valid UTF-8 text");
  }
  return write({{{"INSERT INTO outcomes (sender_id, domain, score, lesson, source, project, "
                  "tenant) VALUES ($1, $2, $3::bigint, $4, $5, $6, $7)",
                  {o.sender_id, o.domain, o.score, o.lesson, o.source, o.project, scope.tenant()}}},
                {}});
}

Result<std::vector<OutcomeRecord>> PgStore::recent_outcomes(
    const MemoryScope& scope, const std::string& sender_id, std::size_t limit,
    const std::optional<std::string>& project) {
  KERNEX_ASSIGN_OR_RETURN(
      auto rows, query("SELECT sender_id, domain, score, lesson, source, project, created_at FROM "
                       "outcomes WHERE tenant = $4 AND "
                       "sender_id = $1 "
                       "AND ($2::text IS NULL OR project = $2) ORDER BY id DESC LIMIT $3::bigint",
                       {sender_id, project, count_param(limit), scope.tenant()}));
  std::vector<OutcomeRecord> out;
  for (int i = 0; i < rows.size(); ++i) {
    out.push_back({rows.text(i, 0), rows.text(i, 1), static_cast<int>(rows.int64(i, 2)),
                   rows.text(i, 3), rows.text(i, 4), rows.text(i, 5), rows.text(i, 6)});
  }
  return out;
}

Result<std::uint64_t> PgStore::prune_outcomes(const MemoryScope& scope, std::size_t keep) {
  KERNEX_ASSIGN_OR_RETURN(
      auto r,
      query(
          "DELETE FROM outcomes WHERE id IN (SELECT id FROM (SELECT id, row_number() OVER "
          "(PARTITION BY sender_id ORDER BY id DESC) AS n FROM outcomes WHERE tenant = $2) ranked "
          "WHERE n > $1::bigint)",
          {count_param(keep), scope.tenant()}));
  return r.affected();
}

}  // namespace kernex::postgres
