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
  std::vector<Sent> sent;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string& text = statements[i]->sql;
    const int count = static_cast<int>(statements[i]->params.size());
    Sent s{&text, head_of(text)};
    std::string name;
    if (!transaction_control(s.head, statements[i]->params.size())) {
      if (auto it = prepared_.find(text); it != prepared_.end()) {
        name = it->second;
      } else if (prepared_.size() < kMaxPrepared) {
        name = "kx" + std::to_string(prepared_.size());
        s.prepare = PQsendPrepare(conn_, name.c_str(), text.c_str(), count, nullptr) == 1;
        if (!s.prepare) break;
        prepared_.emplace(text, name);  // taken back below unless the server accepts it
      }
    }
    const int ok = name.empty() ? PQsendQueryParams(conn_, text.c_str(), count, nullptr,
                                                    values[i].data(), nullptr, nullptr, 0)
                                : PQsendQueryPrepared(conn_, name.c_str(), count, values[i].data(),
                                                      nullptr, nullptr, 0);
    if (ok != 1) break;
    sent.push_back(std::move(s));
  }
  // A send that failed leaves the connection in an unknown state (part of the list may have
  // reached the server): it is dropped and every statement reports the loss.
  if (sent.size() < n || PQpipelineSync(conn_) != 1) {
    poisoned_ = true;
    prepared_.clear();
    return rest(lost);
  }
  for (const Sent& s : sent) {
    std::optional<Error> unparsed;  // the statement's Parse failed: the reason, not "skipped"
    if (s.prepare) {
      pg_result* parsed = PQgetResult(conn_);
      if (!parsed) break;  // the connection went away
      if (PQresultStatus(parsed) == PGRES_COMMAND_OK) {
        PQclear(parsed);
      } else {
        prepared_.erase(*s.text);
        if (PQresultStatus(parsed) == PGRES_FATAL_ERROR) {
          unparsed = failure(s.head, parsed).error();
        } else {
          PQclear(parsed);
        }
      }
      while (pg_result* extra = PQgetResult(conn_)) PQclear(extra);
    }
    pg_result* result = PQgetResult(conn_);
    if (!result) break;  // the connection went away: libpq has nothing more to give
    while (pg_result* extra = PQgetResult(conn_)) PQclear(extra);
    if (unparsed) {
      PQclear(result);
      out.push_back(std::unexpected(*unparsed));
      if (broken()) break;
      continue;
    }
    const auto status = PQresultStatus(result);
    if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) {
      out.emplace_back(Rows(result));
    } else if (status == PGRES_PIPELINE_ABORTED) {
      PQclear(result);
      out.push_back(fail(ErrorCode::Memory,
                         options_.what + ": " + s.head + " skipped: an earlier statement failed"));
    } else {
      const std::string state = sqlstate_;
      out.push_back(failure(s.head, result));
      if (!state.empty() && sqlstate_.empty()) sqlstate_ = state;  // the first failure's
    }
    if (broken()) break;
  }
  pg_result* sync = broken() ? nullptr : PQgetResult(conn_);
  const bool synced = sync && PQresultStatus(sync) == PGRES_PIPELINE_SYNC;
  if (sync) PQclear(sync);
  if (!synced || PQexitPipelineMode(conn_) != 1) poisoned_ = true;
  return rest(lost);
}

}  // namespace kernex::pg
