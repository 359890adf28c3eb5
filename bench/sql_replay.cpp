#include "sql_replay.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string_view>

namespace kernex::bench {
namespace {

struct Recorder {
  std::mutex mutex;
  std::string suffix;
  std::atomic<bool> recording{false};  // read first, without the mutex
  std::vector<RecordedStatement> statements;
};
Recorder& recorder() {
  static Recorder r;
  return r;
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "sql_replay: %s\n", what.c_str());
  std::exit(1);
}

bool ends_with(const char* s, const std::string& suffix) {
  const std::string_view v = s == nullptr ? "" : s;
  return v.size() >= suffix.size() && v.substr(v.size() - suffix.size()) == suffix;
}

int on_trace(unsigned type, void*, void* p, void* x) {
  auto* stmt = static_cast<sqlite3_stmt*>(p);
  // A statement's own run is traced with its own text (the very pointer sqlite3_sql returns); a
  // trigger's, inside it, with a comment naming the trigger.
  if (type != SQLITE_TRACE_STMT || x == nullptr || x != sqlite3_sql(stmt)) return 0;
  Recorder& r = recorder();
  if (!r.recording) return 0;
  std::lock_guard lock(r.mutex);
  if (!r.recording || !ends_with(sqlite3_db_filename(sqlite3_db_handle(stmt), "main"), r.suffix))
    return 0;
  RecordedStatement s{sqlite3_sql(stmt), {}, sqlite3_db_handle(stmt)};
  if (sqlite3_bind_parameter_count(stmt) == 0) {
    r.statements.push_back(std::move(s));
    return 0;
  }
  char* expanded = sqlite3_expanded_sql(stmt);
  const bool parsed = expanded != nullptr && parse_expanded(s.sql, expanded, s.args);
  const std::string shown = expanded == nullptr ? "(none)" : expanded;
  sqlite3_free(expanded);
  if (!parsed) die("cannot split the values out of: " + shown);
  r.statements.push_back(std::move(s));
  return 0;
}

int trace_connection(sqlite3* db, char**, const sqlite3_api_routines*) {
  sqlite3_trace_v2(db, SQLITE_TRACE_STMT, on_trace, nullptr);
  return SQLITE_OK;
}

// A quoted run ('...' or "...", the quote doubled inside) at s[i]; its end past the closing quote.
std::size_t quoted_end(const std::string& s, std::size_t i) {
  const char q = s[i];
  for (++i; i < s.size(); ++i) {
    if (s[i] != q) continue;
    if (i + 1 < s.size() && s[i + 1] == q) {
      ++i;
      continue;
    }
    return i + 1;
  }
  return std::string::npos;
}

// One literal as sqlite3_expanded_sql writes it, at e[j]: NULL, a number or a quoted text.
bool parse_literal(const std::string& e, std::size_t& j, SqlValue& out) {
  if (e.compare(j, 4, "NULL") == 0) {
    j += 4;
    out = std::monostate{};
    return true;
  }
  if (e[j] == '\'') {
    const std::size_t end = quoted_end(e, j);
    if (end == std::string::npos) return false;
    std::string text;
    for (std::size_t k = j + 1; k + 1 < end; ++k) {
      text += e[k];
      if (e[k] == '\'') ++k;  // a doubled quote
    }
    out = std::move(text);
    j = end;
    return true;
  }
  std::size_t k = j;
  bool real = false;
  while (k < e.size() && (std::isdigit(static_cast<unsigned char>(e[k])) || e[k] == '-' ||
                          e[k] == '+' || e[k] == '.' || e[k] == 'e' || e[k] == 'E')) {
    real = real || e[k] == '.' || e[k] == 'e' || e[k] == 'E';
    ++k;
  }
  if (k == j) return false;  // a blob or zeroblob: not bound by the stores recorded here
  const std::string number = e.substr(j, k - j);
  if (real)
    out = std::strtod(number.c_str(), nullptr);
  else
    out = static_cast<std::int64_t>(std::strtoll(number.c_str(), nullptr, 10));
  j = k;
  return true;
}

void bind(sqlite3_stmt* st, int index, const SqlValue& v) {
  if (const auto* i = std::get_if<std::int64_t>(&v)) {
    sqlite3_bind_int64(st, index, *i);
  } else if (const auto* d = std::get_if<double>(&v)) {
    sqlite3_bind_double(st, index, *d);
  } else if (const auto* t = std::get_if<std::string>(&v)) {
    sqlite3_bind_text(st, index, t->data(), static_cast<int>(t->size()), SQLITE_STATIC);
  } else {
    sqlite3_bind_null(st, index);
  }
}

}  // namespace

void install_sql_recorder(const std::string& suffix) {
  {
    std::lock_guard lock(recorder().mutex);
    recorder().suffix = suffix;
  }
  sqlite3_auto_extension(reinterpret_cast<void (*)()>(trace_connection));
}

void remove_sql_recorder() {
  sqlite3_cancel_auto_extension(reinterpret_cast<void (*)()>(trace_connection));
}

void start_recording() {
  std::lock_guard lock(recorder().mutex);
  recorder().statements.clear();
  recorder().recording = true;
}

std::vector<RecordedStatement> stop_recording() {
  std::lock_guard lock(recorder().mutex);
  recorder().recording = false;
  return std::move(recorder().statements);
}

bool parse_expanded(const std::string& sql, const std::string& expanded,
                    std::vector<std::pair<int, SqlValue>>& args) {
  std::size_t i = 0, j = 0;
  int highest = 0;
  while (i < sql.size()) {
    if (sql[i] == '\'' || sql[i] == '"') {  // copied as it is
      const std::size_t end = quoted_end(sql, i);
      if (end == std::string::npos || expanded.compare(j, end - i, sql, i, end - i) != 0)
        return false;
      j += end - i;
      i = end;
      continue;
    }
    if (sql[i] != '?') {
      if (j >= expanded.size() || expanded[j] != sql[i]) return false;
      ++i;
      ++j;
      continue;
    }
    std::size_t digits = i + 1;
    while (digits < sql.size() && std::isdigit(static_cast<unsigned char>(sql[digits]))) ++digits;
    const int index = digits > i + 1 ? std::atoi(sql.c_str() + i + 1) : highest + 1;
    highest = std::max(highest, index);
    SqlValue value;
    if (j >= expanded.size() || !parse_literal(expanded, j, value)) return false;
    args.emplace_back(index, std::move(value));
    i = digits;
  }
  return j == expanded.size();
}

SqlReplayer::~SqlReplayer() {
  for (auto& [sql, st] : prepared_) sqlite3_finalize(st);
}

PreparedStatement SqlReplayer::prepare(const RecordedStatement& s) {
  auto it = prepared_.find(s.sql);
  if (it == prepared_.end()) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, s.sql.c_str(), -1, &st, nullptr) != SQLITE_OK)
      die("preparing '" + s.sql + "': " + sqlite3_errmsg(db_));
    it = prepared_.emplace(s.sql, st).first;
  }
  return {it->second, &s};
}

void SqlReplayer::run(const PreparedStatement& p) {
  sqlite3_stmt* st = p.stmt;
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  for (const auto& [index, value] : p.recorded->args) bind(st, index, value);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
  }
  if (rc != SQLITE_DONE) die("running '" + p.recorded->sql + "': " + sqlite3_errmsg(db_));
}

}  // namespace kernex::bench
