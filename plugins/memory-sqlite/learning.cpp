// Lessons (learned rules, at most 10 per sender + domain + project) and outcomes.
#include "sqlite_store.hpp"
#include "text_rules.hpp"

namespace kernex::sqlite {
namespace {
constexpr std::int64_t kLessonsPerDomain = 10;
constexpr std::int64_t kLessonsListed = 50;
}  // namespace

Result<void> SqliteStore::store_lesson(const MemoryScope& scope, const Lesson& l) {
  if (l.domain.empty() || l.rule.empty())
    return fail(ErrorCode::Usage, "memory-sqlite: a lesson needs a domain and a rule");
  if (invalid_utf8_at(l.rule) || invalid_utf8_at(l.domain)) {
    return fail(ErrorCode::Parse, "memory-sqlite: the lesson is not valid UTF-8");
  }
  Hold lock(*this, Hold::Mode::Write);
  return db_->write<void>([&]() -> Result<void> {
    // Repeating a rule reinforces it (and moves it to the front) instead of adding a copy.
    KERNEX_ASSIGN_OR_RETURN(
        auto reinforce,
        db_->prepare(
            "UPDATE lessons SET occurrences = occurrences + 1, updated_at = datetime('now'), "
            "recency = (SELECT coalesce(max(recency), 0) + 1 FROM lessons) "
            "WHERE tenant = ? AND sender_id = ? AND domain = ? AND project = ? AND rule = ?"));
    reinforce.bind_all(scope.tenant(), l.sender_id, l.domain, l.project, l.rule);
    KERNEX_ASSIGN_OR_RETURN(auto changed, reinforce.run());
    if (changed > 0) return {};
    KERNEX_ASSIGN_OR_RETURN(
        auto insert,
        db_->prepare(
            "INSERT INTO lessons (tenant, sender_id, domain, rule, project, recency) "
            "VALUES (?, ?, ?, ?, ?, (SELECT coalesce(max(recency), 0) + 1 FROM lessons))"));
    insert.bind_all(scope.tenant(), l.sender_id, l.domain, l.rule, l.project);
    KERNEX_RETURN_IF_ERROR(insert.run());
    KERNEX_ASSIGN_OR_RETURN(
        auto prune, db_->prepare("DELETE FROM lessons WHERE tenant = ?5 AND sender_id = ?1 AND "
                                 "domain = ?2 AND project = ?3 AND id NOT IN "
                                 "(SELECT id FROM lessons WHERE tenant = ?5 AND sender_id = ?1 "
                                 "AND domain = ?2 AND project = ?3 ORDER BY "
                                 "recency DESC LIMIT ?4)"));
    prune.bind_all(l.sender_id, l.domain, l.project, kLessonsPerDomain, scope.tenant());
    KERNEX_RETURN_IF_ERROR(prune.run());
    return {};
  });
}

// The project's rules, then general ones: two index-ordered reads (lessons_sender) rather than
// one ORDER BY over both, which sorted in a temporary b-tree on every turn even with no rules.
Result<std::vector<Lesson>> SqliteStore::lessons(const MemoryScope& scope,
                                                 const std::string& sender_id,
                                                 const std::optional<std::string>& project) {
  Hold lock(*this);
  std::vector<Lesson> out;
  const auto read = [&](const std::string& which) -> Result<void> {
    // A handle per read: the cached statement is reset when it goes.
    KERNEX_ASSIGN_OR_RETURN(
        auto stmt,
        db_->prepare("SELECT sender_id, domain, rule, project, occurrences, updated_at "
                     "FROM lessons WHERE tenant = ?4 AND sender_id = ?1 AND project = ?2 "
                     "ORDER BY recency DESC LIMIT ?3"));
    stmt.bind_all(sender_id, which, kLessonsListed - static_cast<std::int64_t>(out.size()),
                  scope.tenant());
    for (;;) {
      KERNEX_ASSIGN_OR_RETURN(auto row, stmt.step());
      if (!row) return {};
      out.push_back({stmt.text(0), stmt.text(1), stmt.text(2), stmt.text(3),
                     static_cast<std::uint32_t>(stmt.integer(4)), stmt.text(5)});
    }
  };
  if (project && !project->empty()) KERNEX_RETURN_IF_ERROR(read(*project));
  if (out.size() < static_cast<std::size_t>(kLessonsListed)) KERNEX_RETURN_IF_ERROR(read(""));
  return out;
}

Result<void> SqliteStore::store_outcome(const MemoryScope& scope, const OutcomeRecord& o) {
  if (o.score < -1 || o.score > 1) {
    return fail(ErrorCode::Usage, "memory-sqlite: an outcome's score must be -1, 0 or 1, got " +
                                      std::to_string(o.score));
  }
  if (invalid_utf8_at(o.lesson) || invalid_utf8_at(o.domain)) {
    return fail(ErrorCode::Parse, "memory-sqlite: the outcome is not valid UTF-8");
  }
  Hold lock(*this, Hold::Mode::Write);
  return db_->write<void>([&]() -> Result<void> {
    KERNEX_ASSIGN_OR_RETURN(auto stmt,
                            db_->prepare("INSERT INTO outcomes (sender_id, domain, score, lesson, "
                                         "source, project, tenant) VALUES (?, ?, ?, "
                                         "?, ?, ?, ?)"));
    stmt.bind_all(o.sender_id, o.domain, o.score, o.lesson, o.source, o.project, scope.tenant());
    KERNEX_RETURN_IF_ERROR(stmt.run());
    return {};
  });
}

// One statement per case, each read newest first straight from an index (outcomes_sender,
// outcomes_sender_newest): `?2 IS NULL OR project = ?2` in one statement sorted every turn.
Result<std::vector<OutcomeRecord>> SqliteStore::recent_outcomes(
    const MemoryScope& scope, const std::string& sender_id, std::size_t limit,
    const std::optional<std::string>& project) {
  Hold lock(*this);
  KERNEX_ASSIGN_OR_RETURN(
      auto stmt,
      db_->prepare(
          project
              ? "SELECT sender_id, domain, score, lesson, source, project, created_at "
                "FROM outcomes WHERE tenant = ?4 AND sender_id = ?1 AND project = ?3 ORDER BY id "
                "DESC LIMIT ?2"
              : "SELECT sender_id, domain, score, lesson, source, project, created_at "
                "FROM outcomes WHERE tenant = ?4 AND sender_id = ?1 ORDER BY id DESC LIMIT ?2"));
  stmt.bind_all(sender_id, static_cast<std::int64_t>(limit));
  if (project) stmt.bind(3, *project);
  stmt.bind(4, scope.tenant());
  std::vector<OutcomeRecord> out;
  for (;;) {
    KERNEX_ASSIGN_OR_RETURN(auto row, stmt.step());
    if (!row) break;
    out.push_back({stmt.text(0), stmt.text(1), static_cast<int>(stmt.integer(2)), stmt.text(3),
                   stmt.text(4), stmt.text(5), stmt.text(6)});
  }
  return out;
}

Result<std::uint64_t> SqliteStore::prune_outcomes(const MemoryScope& scope, std::size_t keep) {
  Hold lock(*this, Hold::Mode::Write);
  return db_->write<std::uint64_t>([&]() -> Result<std::uint64_t> {
    KERNEX_ASSIGN_OR_RETURN(
        auto stmt,
        db_->prepare(
            "DELETE FROM outcomes WHERE id IN (SELECT id FROM (SELECT id, row_number() OVER "
            "(PARTITION BY sender_id ORDER BY id DESC) AS n FROM outcomes WHERE tenant = ?2) WHERE "
            "n > "
            "?1)"));
    stmt.bind_all(static_cast<std::int64_t>(keep), scope.tenant());
    return stmt.run();
  });
}

}  // namespace kernex::sqlite
