// libpq's pipeline mode: a list of statements sent back to back and one Sync, then every result
// read in order, so the list costs one round trip instead of one per statement.
#include <libpq-fe.h>

#include <optional>

#include "kernex/pg/connection.hpp"

namespace kernex::pg {
namespace {

std::string head_of(const std::string& text) {
  return text.substr(0, std::min<std::size_t>(text.find_first_of(" \n"), 40));
}

struct Sent {
  const std::string* text;
  std::string head;
  bool prepare = false;  // a Parse went before it: its result comes first
};

}  // namespace

// The steps of Connection::pipeline, in order: check every parameter, send every statement
// (prepared once per connection) and one Sync, read each statement's result, read the Sync.
struct Connection::Pipeline {
  Connection& c;
  std::vector<Result<Rows>>& out;

  // Sends `statement` (its Parse first, the first time its text is seen). False: the send failed.
  bool send(const Statement& statement, const std::vector<const char*>& values,
            std::vector<Sent>& sent) {
    const std::string& text = statement.sql;
    const int count = static_cast<int>(statement.params.size());
    Sent s{&text, head_of(text)};
    std::string name;
    if (!transaction_control(s.head, statement.params.size())) {
      if (auto it = c.prepared_.find(text); it != c.prepared_.end()) {
        name = it->second;
      } else if (c.prepared_.size() < kMaxPrepared) {
        name = "kx" + std::to_string(c.prepared_.size());
        s.prepare = PQsendPrepare(c.conn_, name.c_str(), text.c_str(), count, nullptr) == 1;
        if (!s.prepare) return false;
        c.prepared_.emplace(text, name);  // taken back in read() unless the server accepts it
      }
    }
    const int ok = name.empty() ? PQsendQueryParams(c.conn_, text.c_str(), count, nullptr,
                                                    values.data(), nullptr, nullptr, 0)
                                : PQsendQueryPrepared(c.conn_, name.c_str(), count, values.data(),
                                                      nullptr, nullptr, 0);
    if (ok != 1) return false;
    sent.push_back(std::move(s));
    return true;
  }

  // The result of a Parse sent before `s`: `unparsed` gets the reason it failed. False: the
  // connection went away.
  bool parse_result(const Sent& s, std::optional<Error>& unparsed) {
    pg_result* parsed = PQgetResult(c.conn_);
    if (!parsed) return false;
    if (PQresultStatus(parsed) == PGRES_COMMAND_OK) {
      PQclear(parsed);
    } else {
      c.prepared_.erase(*s.text);
      if (PQresultStatus(parsed) == PGRES_FATAL_ERROR) {
        unparsed = c.failure(s.head, parsed).error();
      } else {
        PQclear(parsed);
      }
    }
    while (pg_result* extra = PQgetResult(c.conn_)) PQclear(extra);
    return true;
  }

  // Reads `s`'s result into `out`. False: the connection went away (libpq has nothing more).
  bool read(const Sent& s) {
    std::optional<Error> unparsed;  // the statement's Parse failed: the reason, not "skipped"
    if (s.prepare && !parse_result(s, unparsed)) return false;
    pg_result* result = PQgetResult(c.conn_);
    if (!result) return false;
    while (pg_result* extra = PQgetResult(c.conn_)) PQclear(extra);
    if (unparsed) {
      PQclear(result);
      out.push_back(std::unexpected(*unparsed));
      return true;
    }
    const auto status = PQresultStatus(result);
    if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) {
      out.emplace_back(Rows(result));
    } else if (status == PGRES_PIPELINE_ABORTED) {
      PQclear(result);
      out.push_back(fail(ErrorCode::Memory, c.options_.what + ": " + s.head +
                                                " skipped: an earlier statement failed"));
    } else {
      const std::string state = c.sqlstate_;
      out.push_back(c.failure(s.head, result));
      if (!state.empty() && c.sqlstate_.empty()) c.sqlstate_ = state;  // the first failure's
    }
    return true;
  }

  // The Sync's result ends pipeline mode; anything else leaves the connection unusable.
  void finish() {
    pg_result* sync = c.broken() ? nullptr : PQgetResult(c.conn_);
    const bool synced = sync && PQresultStatus(sync) == PGRES_PIPELINE_SYNC;
    if (sync) PQclear(sync);
    if (!synced || PQexitPipelineMode(c.conn_) != 1) c.poisoned_ = true;
  }
};

std::vector<Result<Rows>> Connection::pipeline(const std::vector<const Statement*>& statements) {
  sqlstate_.clear();
  const std::size_t n = statements.size();
  std::vector<Result<Rows>> out;
  out.reserve(n);
  auto rest = [&](const Error& e) {
    while (out.size() < n) out.push_back(std::unexpected(e));
    return std::move(out);
  };
  const Error lost{ErrorCode::Io, options_.what + ": connection to PostgreSQL lost"};
  if (broken()) return rest(lost);
  // Every parameter is checked before anything is sent: a bad one fails the whole list unsent.
  std::vector<std::vector<const char*>> values(n);
  for (std::size_t i = 0; i < n; ++i) {
    auto v = this->values(statements[i]->params.data(), statements[i]->params.size());
    if (!v) return rest(v.error());
    values[i] = std::move(*v);
  }
  if (PQenterPipelineMode(conn_) != 1) {
    return rest(Error{ErrorCode::Internal,
                      options_.what + ": cannot enter pipeline mode: " + PQerrorMessage(conn_)});
  }
  Pipeline p{*this, out};
  std::vector<Sent> sent;
  for (std::size_t i = 0; i < n; ++i) {
    if (!p.send(*statements[i], values[i], sent)) break;
  }
  // A send that failed leaves the connection in an unknown state (part of the list may have
  // reached the server): it is dropped and every statement reports the loss.
  if (sent.size() < n || PQpipelineSync(conn_) != 1) {
    poisoned_ = true;
    prepared_.clear();
    return rest(lost);
  }
  for (const Sent& s : sent) {
    if (!p.read(s) || broken()) break;
  }
  p.finish();
  return rest(lost);
}

}  // namespace kernex::pg
