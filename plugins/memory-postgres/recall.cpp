// Recall: full-text search over user messages and summaries (GIN expression indexes, 'simple'
// configuration). The user's text never reaches the query parser as syntax: its significant words
// (the SQLite store's rule) are each a parameter to phraseto_tsquery, so `a & b | !c`, quotes or
// backslashes are plain text. Every word first; any word only to fill up.
#include <algorithm>
#include <limits>

#include "pg_store.hpp"
#include "recall_rank.hpp"
#include "text_rules.hpp"

namespace kernex::postgres {
namespace {

// The words of fts_query (significant, no question words, at most 16, distinct): the SQLite
// store quotes them for FTS5; here they travel as parameters.
std::vector<std::string> recall_words(std::string_view text) {
  std::vector<std::string> out;
  const std::string quoted = sqlite::fts_query(text, "\x1f");
  std::size_t start = 0;
  while (start < quoted.size()) {
    const std::size_t end = std::min(quoted.find('\x1f', start), quoted.size());
    std::string w = quoted.substr(start + 1, end - start - 2);  // strip the quotes
    std::string plain;
    for (std::size_t i = 0; i < w.size(); ++i) {
      plain += w[i];
      if (w[i] == '"' && i + 1 < w.size() && w[i + 1] == '"') ++i;
    }
    out.push_back(std::move(plain));
    start = end + 1;
  }
  return out;
}

// phraseto_tsquery('simple', $first) && … over the words' parameters.
std::string tsquery_sql(std::size_t words, int first, const char* joiner) {
  std::string sql = "(";
  for (std::size_t i = 0; i < words; ++i) {
    if (i > 0) sql += joiner;
    sql += "phraseto_tsquery('simple', $" + std::to_string(first + static_cast<int>(i)) + "::text)";
  }
  return sql + ")";
}

constexpr std::string_view kMessageVector =
    "to_tsvector('simple'::regconfig, left(m.content, 200000))";
constexpr std::string_view kSummaryVector =
    "to_tsvector('simple'::regconfig, left(s.text, 200000))";

using sqlite::RankedHits;

// Messages of the current conversation from the returned seq on are in the history window
// already (the newest q.skip_newest); none is when nothing is skipped.
Result<std::int64_t> history_boundary(pg::Connection& c, const MemoryScope& scope,
                                      const RecallQuery& q) {
  if (q.skip_newest == 0 || q.current_conversation.empty())
    return std::numeric_limits<std::int64_t>::max();
  KERNEX_ASSIGN_OR_RETURN(
      auto edge,
      c.exec("SELECT seq FROM messages WHERE conversation_id = (SELECT id FROM conversations WHERE "
             "id = $1 AND tenant = $3) ORDER BY seq DESC LIMIT 1 OFFSET $2::bigint",
             {q.current_conversation, count_param(q.skip_newest - 1), scope.tenant()}));
  return edge.empty() ? 0 : edge.int64(0, 0);
}

// The parameters both searches share: $1 sender, $2 current conversation, $3 boundary, $4 since,
// $5 limit, $6 tenant, then the words from $7.
// ts_rank: higher is better; negated so that, like bm25, lower sorts first.
Result<void> search_messages(pg::Connection& c, const std::string& tsq,
                             const std::vector<pg::Param>& params, RankedHits& hits) {
  const std::string messages_sql =
      "SELECT m.conversation_id, m.seq, m.content, m.created_at, -ts_rank(" +
      std::string(kMessageVector) + ", " + tsq +
      ") FROM messages m JOIN conversations c ON c.id = m.conversation_id WHERE m.role = 'user' "
      "AND " +
      std::string(kMessageVector) + " @@ " + tsq +
      " "
      "AND c.tenant = $6 AND ($1 = '' OR c.sender_id = $1) AND (m.conversation_id <> $2 OR "
      "m.seq < $3::bigint) "
      "AND ($4::text IS NULL OR m.created_at >= $4) ORDER BY 5, m.seq DESC LIMIT $5::bigint";
  auto messages = c.exec(messages_sql, params);
  if (!messages)
    return fail(messages.error().code, "postgres memory: recall over messages failed",
                messages.error());
  for (int i = 0; i < messages->size(); ++i) {
    hits.add(messages->real(i, 4), RecallHit{"message", messages->text(i, 0), messages->int64(i, 1),
                                             messages->text(i, 2), messages->text(i, 3)});
  }
  return {};
}

// Summaries of the sender's other conversations (as search_messages, without a boundary).
Result<void> search_summaries(pg::Connection& c, const std::string& tsq,
                              const std::vector<pg::Param>& params, RankedHits& hits) {
  const std::string summaries_sql =
      "SELECT s.conversation_id, s.text, s.updated_at, -ts_rank(" + std::string(kSummaryVector) +
      ", " + tsq + ") FROM summaries s JOIN conversations c ON c.id = s.conversation_id WHERE " +
      std::string(kSummaryVector) + " @@ " + tsq +
      " "
      "AND c.tenant = $6 AND ($1 = '' OR c.sender_id = $1) AND s.conversation_id <> $2 AND "
      "$3::bigint IS NOT NULL "
      "AND ($4::text IS NULL OR s.updated_at >= $4) ORDER BY 4, s.id DESC LIMIT $5::bigint";
  auto summaries = c.exec(summaries_sql, params);
  if (!summaries) {
    return fail(summaries.error().code, "postgres memory: recall over summaries failed",
                summaries.error());
  }
  for (int i = 0; i < summaries->size(); ++i) {
    hits.add(summaries->real(i, 3), RecallHit{"summary", summaries->text(i, 0), 0,
                                              summaries->text(i, 1), summaries->text(i, 2)});
  }
  return {};
}

}  // namespace

// Checked query -> its words -> the history window's edge -> every word over messages and
// summaries -> (too few hits) any word, ranked after those -> the best q.limit.
Result<std::vector<RecallHit>> PgStore::recall(const MemoryScope& scope, const RecallQuery& q) {
  // kernex's rule: shorter queries match too much to be useful.
  if (q.text.size() < 3 || q.limit == 0) return std::vector<RecallHit>{};
  if (sqlite::invalid_utf8_at(q.text)) {
    return fail(ErrorCode::Parse, "postgres memory: the recall query is not valid UTF-8");
  }
  std::optional<std::string> since;
  if (q.since) {
    KERNEX_ASSIGN_OR_RETURN(auto s, sqlite::normalize_time(*q.since, "recall since"));
    since = s;
  }
  const std::vector<std::string> words = recall_words(q.text);
  if (words.empty()) return std::vector<RecallHit>{};
  KERNEX_ASSIGN_OR_RETURN(auto lease, pool_->acquire());
  pg::Connection& c = *lease;
  KERNEX_ASSIGN_OR_RETURN(const std::int64_t boundary, history_boundary(c, scope, q));
  std::vector<pg::Param> params{q.sender_id, q.current_conversation, boundary,
                                since,       count_param(q.limit),   scope.tenant()};
  for (const auto& w : words) params.emplace_back(w);

  RankedHits hits;
  const auto search = [&](const char* joiner) -> Result<void> {
    const std::string tsq = tsquery_sql(words.size(), 7, joiner);
    KERNEX_RETURN_IF_ERROR(search_messages(c, tsq, params, hits));
    return search_summaries(c, tsq, params, hits);
  };
  KERNEX_RETURN_IF_ERROR(search(" && "));
  // Hits matching every word rank first, whatever the rank says about partial matches.
  hits.rank_first();
  if (hits.ranked.size() < q.limit && words.size() > 1) {
    KERNEX_RETURN_IF_ERROR(search(" || "));
  }
  return hits.best(q.limit);
}

}  // namespace kernex::postgres
