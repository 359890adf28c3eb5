// Input rules that are not about SQL: UTF-8 validity, search phrases, due dates, task
// similarity (kernex's fuzzy dedup) and ids.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernex/error.hpp"

namespace kernex::sqlite {

// Byte offset of the first invalid UTF-8 sequence, if any.
std::optional<std::size_t> invalid_utf8_at(std::string_view text);

// The user's text as an FTS5 query: its significant words (see below, minus common question
// words), each quoted, joined by `joiner` (" AND " or " OR "), ranked by bm25. Operators in the
// text (AND, NOT, NEAR, *, parentheses, quotes, column filters) are never interpreted. "" when no
// word is left. (kernex quoted the whole text as one phrase, so a question only matched its exact
// wording.)
std::string fts_query(std::string_view text, std::string_view joiner);

// "2026-02-22T07:00:00Z" / "2026-02-22 07:00:00" / "2026-02-22 07:00" -> "2026-02-22 07:00:00";
// anything else is an error naming `field`.
Result<std::string> normalize_time(std::string_view text, std::string_view field);

// kernex's significant words: split on non-alphanumerics, lower-case, >= 3 bytes, no stop words.
std::vector<std::string> significant_words(std::string_view text);
// Both need >= 3 significant words; similar when at least half of the shorter list's words
// occur in the longer one.
bool similar_descriptions(std::string_view a, std::string_view b);

std::string new_uuid();
// A UUIDv7 (RFC 9562): the Unix time in milliseconds, then random bits. Ids made one after another
// sort after one another, so a b-tree keyed by them (conversations' primary key, messages by
// conversation) takes a new one on its rightmost page instead of a random page of its own.
std::string new_time_ordered_uuid();

}  // namespace kernex::sqlite
