#include "kernex/pg/connection.hpp"

#include <fcntl.h>
#include <libpq-fe.h>
#include <poll.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>

namespace kernex::pg {
namespace {

std::string trimmed(const char* message) {
  std::string s = message ? message : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// libpq's errors can quote the connection string (`missing "=" after "…"`), so a message about a
// DSN that does not parse is replaced whole, and a password the DSN holds is masked wherever it
// appears.
std::string without_password(std::string message, const std::string& dsn) {
  if (dsn.empty()) return message;
  char* parse_error = nullptr;
  PQconninfoOption* options = PQconninfoParse(dsn.c_str(), &parse_error);
  if (parse_error) PQfreemem(parse_error);
  if (!options)
    return "the DSN is not a valid libpq connection string or URI (details withheld: they may "
           "quote it)";
  for (PQconninfoOption* o = options; o->keyword; ++o) {
    if (std::string_view(o->keyword) != "password" || !o->val || !*o->val) continue;
    const std::string secret = o->val;
    for (std::size_t at = message.find(secret); at != std::string::npos;
         at = message.find(secret, at + 3)) {
      message.replace(at, secret.size(), "***");
    }
  }
  PQconninfoFree(options);
  return message;
}

}  // namespace

Param::Param(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  value_ = buf;
}

Rows::Rows(pg_result* result) : result_(result, PQclear), rows_(PQntuples(result)) {
  const char* n = PQcmdTuples(result);
  if (n && *n) std::from_chars(n, n + std::char_traits<char>::length(n), affected_);
}

bool Rows::null(int row, int col) const { return PQgetisnull(result_.get(), row, col) != 0; }

std::string Rows::text(int row, int col) const {
  return std::string(PQgetvalue(result_.get(), row, col),
                     static_cast<std::size_t>(PQgetlength(result_.get(), row, col)));
}

std::optional<std::string> Rows::optional_text(int row, int col) const {
  if (null(row, col)) return std::nullopt;
  return text(row, col);
}

std::int64_t Rows::int64(int row, int col) const {
  std::int64_t v = 0;
  const char* p = PQgetvalue(result_.get(), row, col);
  std::from_chars(p, p + PQgetlength(result_.get(), row, col), v);
  return v;
}

double Rows::real(int row, int col) const {
  return null(row, col) ? 0.0 : std::strtod(PQgetvalue(result_.get(), row, col), nullptr);
}

bool Rows::boolean(int row, int col) const {
  return !null(row, col) && PQgetvalue(result_.get(), row, col)[0] == 't';
}

Connection::Connection(pg_conn* conn, Options options) : conn_(conn), options_(std::move(options)) {
  if (::pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) wake_pipe_[0] = wake_pipe_[1] = -1;
}

Connection::~Connection() {
  PQfinish(conn_);
  for (int fd : wake_pipe_) {
    if (fd >= 0) ::close(fd);
  }
}

Result<std::unique_ptr<Connection>> Connection::open(const Options& options) {
  const std::string timeout =
      std::to_string(std::max<long long>(1, options.connect_timeout.count()));
  // The DSN comes first and is expanded; the keywords after it override it, so keepalives and the
  // connect timeout always hold. An empty DSN leaves everything to the PG* environment variables.
  // client_encoding too: every text the kernel sends and reads is UTF-8, whatever the DSN, the
  // environment (PGCLIENTENCODING) or the database's default say.
  const char* keys[] = {"dbname",           "connect_timeout",
                        "application_name", "keepalives",
                        "keepalives_idle",  "keepalives_interval",
                        "keepalives_count", "tcp_user_timeout",
                        "client_encoding",  nullptr};
  const char* values[] = {options.dsn.empty() ? nullptr : options.dsn.c_str(),
                          timeout.c_str(),
                          options.application_name.c_str(),
                          "1",
                          "10",
                          "5",
                          "3",
                          "15000",
                          "UTF8",
                          nullptr};
  pg_conn* conn = PQconnectdbParams(keys, values, 1);
  if (!conn) return fail(ErrorCode::Io, options.what + ": out of memory connecting to PostgreSQL");
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string message = without_password(trimmed(PQerrorMessage(conn)), options.dsn);
    PQfinish(conn);
    return fail(ErrorCode::Io, options.what + ": cannot connect to PostgreSQL: " + message);
  }
  std::unique_ptr<Connection> out(new Connection(conn, options));
  const std::string set =
      "SET statement_timeout = " + std::to_string(options.statement_timeout.count());
  KERNEX_RETURN_IF_ERROR(out->exec(set));
  KERNEX_RETURN_IF_ERROR(out->exec("SET client_min_messages = warning"));
  if (options.idle_in_transaction_timeout.count() > 0) {
    const std::string idle = "SET idle_in_transaction_session_timeout = " +
                             std::to_string(options.idle_in_transaction_timeout.count());
    KERNEX_RETURN_IF_ERROR(out->exec(idle));
  }
  return out;
}

bool Connection::broken() const { return poisoned_ || PQstatus(conn_) != CONNECTION_OK; }

bool Connection::alive() {
  if (broken()) return false;
  // Idle and not listening, the server speaks only to say goodbye (a FATAL error, then the end of
  // the stream, which may not have arrived yet): anything to read means gone.
  pollfd fd{PQsocket(conn_), POLLIN, 0};
  return ::poll(&fd, 1, 0) == 0;
}

bool Connection::idle() const { return PQtransactionStatus(conn_) == PQTRANS_IDLE; }

std::unexpected<Error> Connection::failure(const std::string& what, pg_result* result) {
  std::string message = trimmed(result ? PQresultErrorMessage(result) : PQerrorMessage(conn_));
  if (message.empty()) message = trimmed(PQerrorMessage(conn_));
  const char* state = result ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  sqlstate_ = state ? state : "";
  if (result) PQclear(result);
  if (broken()) {
    sqlstate_.clear();
    return fail(ErrorCode::Io,
                options_.what + ": connection to PostgreSQL lost (" + what + "): " + message);
  }
  return fail(ErrorCode::Memory, options_.what + ": " + what + " failed: " + message +
                                     (sqlstate_.empty() ? "" : " [SQLSTATE " + sqlstate_ + "]"));
}

Result<std::vector<const char*>> Connection::values(const Param* params, std::size_t count) {
  std::vector<const char*> out(count);
  for (std::size_t i = 0; i < count; ++i) {
    const auto& v = params[i].value();
    // libpq takes C strings: a NUL would silently cut the value short (and text cannot hold one).
    if (v && v->find('\0') != std::string::npos) {
      return fail(ErrorCode::Parse, options_.what + ": parameter $" + std::to_string(i + 1) +
                                        " holds a NUL byte, which PostgreSQL text cannot store");
    }
    out[i] = v ? v->c_str() : nullptr;
  }
  return out;
}

Result<Rows> Connection::run(std::string_view sql, const Param* params, std::size_t count) {
  sqlstate_.clear();
  if (broken()) return fail(ErrorCode::Io, options_.what + ": connection to PostgreSQL lost");
  KERNEX_ASSIGN_OR_RETURN(auto values, this->values(params, count));
  const std::string text(sql);
  const std::string head = text.substr(0, std::min<std::size_t>(text.find_first_of(" \n"), 40));
  KERNEX_ASSIGN_OR_RETURN(auto name, prepared(text, head, count));
  pg_result* result = name.empty() ? PQexecParams(conn_, text.c_str(), static_cast<int>(count),
                                                  nullptr, values.data(), nullptr, nullptr, 0)
                                   : PQexecPrepared(conn_, name.c_str(), static_cast<int>(count),
                                                    values.data(), nullptr, nullptr, 0);
  const auto status = result ? PQresultStatus(result) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) return failure(head, result);
  return Rows(result);
}

bool Connection::transaction_control(const std::string& head, std::size_t count) {
  return count == 0 && (head == "BEGIN" || head == "COMMIT" || head == "ROLLBACK" || head == "SET");
}

// Statements that run again and again (every statement the stores send is a fixed text) are
// prepared once per connection: parsing and planning were most of a short statement's cost on
// the server (bench/store). Transaction control and one-off texts past the cap are sent as is.
Result<std::string> Connection::prepared(const std::string& text, const std::string& head,
                                         std::size_t count) {
  if (transaction_control(head, count)) return std::string();
  if (auto it = prepared_.find(text); it != prepared_.end()) return it->second;
  if (prepared_.size() >= kMaxPrepared) return std::string();
  std::string name = "kx" + std::to_string(prepared_.size());
  pg_result* result =
      PQprepare(conn_, name.c_str(), text.c_str(), static_cast<int>(count), nullptr);
  if (!result || PQresultStatus(result) != PGRES_COMMAND_OK) return failure(head, result);
  PQclear(result);
  prepared_.emplace(text, name);
  return name;
}

Result<Rows> Connection::exec(std::string_view sql, std::initializer_list<Param> params) {
  return run(sql, params.begin(), params.size());
}

Result<Rows> Connection::exec(std::string_view sql, const std::vector<Param>& params) {
  return run(sql, params.data(), params.size());
}

Result<void> Connection::script(std::string_view sql) {
  sqlstate_.clear();
  pg_result* result = PQexec(conn_, std::string(sql).c_str());
  const auto status = result ? PQresultStatus(result) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) return failure("script", result);
  PQclear(result);
  return {};
}

void Connection::wake() {
  if (wake_pipe_[1] >= 0) {
    const char byte = 1;
    [[maybe_unused]] auto n = ::write(wake_pipe_[1], &byte, 1);
  }
}

Result<std::vector<std::pair<std::string, std::string>>> Connection::notifications(
    std::chrono::milliseconds timeout) {
  std::vector<std::pair<std::string, std::string>> out;
  auto drain = [&]() -> bool {
    if (PQconsumeInput(conn_) == 0) return false;
    while (PGnotify* n = PQnotifies(conn_)) {
      out.emplace_back(n->relname ? n->relname : "", n->extra ? n->extra : "");
      PQfreemem(n);
    }
    return true;
  };
  if (!drain())
    return fail(ErrorCode::Io, options_.what + ": connection to PostgreSQL lost: " +
                                   trimmed(PQerrorMessage(conn_)));
  if (!out.empty()) return out;
  pollfd fds[2] = {{PQsocket(conn_), POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
  const int n = ::poll(fds, wake_pipe_[0] >= 0 ? 2 : 1, static_cast<int>(timeout.count()));
  if (n > 0 && (fds[1].revents & POLLIN)) {
    char buf[64];
    while (::read(wake_pipe_[0], buf, sizeof buf) > 0) {
    }
  }
  if (n > 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
    if (!drain() || broken())
      return fail(ErrorCode::Io, options_.what + ": connection to PostgreSQL lost: " +
                                     trimmed(PQerrorMessage(conn_)));
  }
  return out;
}

}  // namespace kernex::pg
