#include "kernex/mcp/client.hpp"

#include <signal.h>

#include <deque>
#include <mutex>

#include "kernex/log.hpp"
#include "kernex/mcp/jsonrpc.hpp"
#include "kernex/sandbox/process.hpp"
#include "kernex/sandbox/toolbox.hpp"
#include "kernex/suspend.hpp"
#include "client_exchange.hpp"
#include "server_policy.hpp"

namespace kernex::mcp {
namespace {

using Clock = sandbox::SandboxedProcess::Clock;
constexpr std::size_t kStderrTail = 8;

std::string tail_text(const std::deque<std::string>& tail) {
  std::string out;
  for (const auto& line : tail) out += "\n  " + line;
  return out;
}

}  // namespace

struct McpClient::Impl {
  McpServer server;
  ServerSandbox sandbox;
  ClientOptions options;

  mutable std::mutex mu;
  std::optional<sandbox::Policy> policy;
  std::optional<sandbox::SandboxedProcess> proc;
  std::shared_ptr<std::mutex> tail_mu = std::make_shared<std::mutex>();
  std::shared_ptr<std::deque<std::string>> stderr_tail =
      std::make_shared<std::deque<std::string>>();
  std::int64_t next_id = 1;
  std::optional<std::vector<McpTool>> tools;
  std::stop_token stop;  // the current call's (calls are serialised by mu)
  std::string version;
  Json info;
  int starts = 0;

  std::string who() const { return "MCP server '" + server.name + "'"; }

  // Kills the server after a transport failure and says why, with what it last wrote to stderr.
  Error broken(const std::string& what) {
    std::string msg = who() + " " + what;
    if (proc) {
      proc->kill();
      sandbox::ExitStatus st = proc->wait(Clock::now());
      proc.reset();
      if (st.term_signal != 0 && st.term_signal != SIGKILL) {
        msg += " (it was killed by signal " + std::to_string(st.term_signal) + ")";
      } else if (st.term_signal == 0 && st.exit_code >= 0) {
        msg += " (it exited with status " + std::to_string(st.exit_code) + ")";
      }
    }
    tools.reset();
    std::lock_guard lock(*tail_mu);
    if (!stderr_tail->empty()) msg += "; its last stderr lines:" + tail_text(*stderr_tail);
    msg += "; it will be restarted on the next call";
    log(LogLevel::Warn, msg);
    return Error(ErrorCode::Tool, msg);
  }

  // The host stopped the run mid-request: the exchange is out of step, so the server goes.
  Error cancelled(std::string_view method) {
    if (proc) {
      proc->kill();
      proc->wait(Clock::now());
      proc.reset();
    }
    tools.reset();
    return Error(ErrorCode::Cancelled,
                 who() + ": " + std::string(method) +
                     " was cancelled; the server was stopped and restarts on the next call");
  }

  Result<void> send(const Json& message, Clock::time_point deadline) {
    auto written = proc->write(jsonrpc::frame(message), deadline, stop);
    if (!written && written.error().code == ErrorCode::Cancelled) {
      return std::unexpected(cancelled(message.value("method", std::string("a message"))));
    }
    if (!written)
      return std::unexpected(broken("did not accept a message: " + written.error().message));
    return {};
  }

  // Sends request `id` and waits for its answer; a failure to read is reported here (the server
  // is stopped), a protocol failure through broken().
  Result<Json> request(std::string_view method, const std::optional<Json>& params,
                       Clock::time_point deadline) {
    const std::int64_t id = next_id++;
    KERNEX_RETURN_IF_ERROR(send(jsonrpc::request(id, method, params), deadline));
    detail::ServerLink link;
    link.who = who();
    link.read_line = [&]() -> Result<std::string> {
      auto line = proc->read_line(deadline, options.max_line_bytes, stop);
      if (line) return line;
      if (line.error().code == ErrorCode::Cancelled) return std::unexpected(cancelled(method));
      if (line.error().code == ErrorCode::Limit && Clock::now() >= deadline) {
        return std::unexpected(broken("did not answer " + std::string(method) + " in time"));
      }
      if (line.error().code == ErrorCode::Limit) {
        return std::unexpected(broken("sent a line over the " +
                                      std::to_string(options.max_line_bytes) +
                                      "-byte cap while answering " + std::string(method)));
      }
      return std::unexpected(broken("closed its output while answering " + std::string(method)));
    };
    link.send = [&](const Json& message) { return send(message, deadline); };
    link.broken = [&](const std::string& what) { return broken(what); };
    link.tools_changed = [&] { tools.reset(); };
    return detail::await_response(link, id, method);
  }

  Result<void> connect() {
    if (proc && proc->running()) return {};
    if (proc) proc.reset();  // exited since the last call: restart
    if (!policy) {
      KERNEX_ASSIGN_OR_RETURN(auto built, detail::build_server_policy(server, sandbox));
      policy = std::move(built);
    }
    {
      std::lock_guard lock(*tail_mu);
      stderr_tail->clear();
    }
    sandbox::ProcessOptions popts;
    // The callback may outlive nothing here (the process is owned by this Impl), but shared
    // pointers keep it independent of moves.
    popts.on_stderr_line = [name = server.name, mu = tail_mu,
                            tail = stderr_tail](std::string_view line) {
      log(LogLevel::Info, "mcp[" + name + "] " + std::string(line));
      std::lock_guard lock(*mu);
      tail->emplace_back(line);
      if (tail->size() > kStderrTail) tail->pop_front();
    };
    sandbox::Command cmd;
    cmd.argv.push_back(server.command);
    // As for a toolbox: a relative argument naming a file shipped in the skill folder (the
    // server's entry script) is passed as its absolute path, the working directory being the
    // workspace.
    for (const auto& arg : server.args)
      cmd.argv.push_back(sandbox::skill_file(server.source_dir, arg).value_or(arg));
    if (!server.source_dir.empty()) cmd.env["KERNEX_SKILL_DIR"] = server.source_dir;
    auto started = sandbox::SandboxedProcess::start(*policy, cmd, std::move(popts));
    if (!started) return fail(ErrorCode::Sandbox, who() + " could not be started", started.error());
    proc.emplace(std::move(*started));
    ++starts;
    tools.reset();

    const auto deadline = Clock::now() + options.startup_timeout;
    Json params = {{"protocolVersion", kLatestProtocolVersion},
                   {"capabilities", Json::object()},
                   {"clientInfo", {{"name", "kernex"}, {"version", "0.1.0"}}}};
    auto result = request("initialize", params, deadline);
    if (!result) {
      if (proc) proc.reset();
      return std::unexpected(result.error());
    }
    auto v = detail::negotiated_version(*result);
    if (!v) return std::unexpected(broken(v.error().message));
    version = *v;
    info = result->value("serverInfo", Json::object());
    if (auto ok = send(jsonrpc::notification("notifications/initialized"), deadline); !ok) {
      return std::unexpected(ok.error());
    }
    return {};
  }

  Result<std::vector<McpTool>> list_tools() {
    KERNEX_RETURN_IF_ERROR(connect());
    if (tools) return *tools;
    auto listed = detail::list_all_tools(
        [&](const std::optional<Json>& params) {
          return request("tools/list", params, Clock::now() + options.request_timeout);
        },
        who());
    if (listed) tools = *listed;
    return listed;
  }

  Result<CallResult> call_tool(const std::string& name, const Json& arguments) {
    KERNEX_RETURN_IF_ERROR(connect());
    Json params = {{"name", name}, {"arguments", arguments.is_null() ? Json::object() : arguments}};
    KERNEX_ASSIGN_OR_RETURN(auto result,
                            request("tools/call", params, Clock::now() + options.request_timeout));
    return CallResult{render_call_result(result, options.render), result};
  }

  void shutdown(std::chrono::milliseconds grace) {
    if (!proc) return;
    proc->close_stdin();
    sandbox::ExitStatus st = proc->wait(Clock::now() + grace);
    if (st.term_signal == SIGKILL)
      log(LogLevel::Info, who() + " did not exit after stdin closed; killed");
    proc.reset();
    tools.reset();
  }
};

McpClient::McpClient(McpServer server, ServerSandbox sandbox, ClientOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->server = std::move(server);
  impl_->sandbox = std::move(sandbox);
  impl_->options = options;
}

McpClient::~McpClient() { shutdown(); }

Result<void> McpClient::connect() {
  std::lock_guard lock(impl_->mu);
  return impl_->connect();
}

Result<std::vector<McpTool>> McpClient::list_tools(std::stop_token stop) {
  std::lock_guard lock(impl_->mu);
  impl_->stop = std::move(stop);
  auto result = impl_->list_tools();
  impl_->stop = {};
  return result;
}

Result<CallResult> McpClient::call_tool(const std::string& name, const Json& arguments,
                                        std::stop_token stop) {
  // Another process's answer, and other calls to the same server queued on its mutex.
  const BlockingScope waiting;
  std::lock_guard lock(impl_->mu);
  impl_->stop = std::move(stop);
  auto result = impl_->call_tool(name, arguments);
  impl_->stop = {};
  return result;
}

void McpClient::shutdown(std::chrono::milliseconds grace) {
  std::lock_guard lock(impl_->mu);
  impl_->shutdown(grace);
}

bool McpClient::running() const {
  std::lock_guard lock(impl_->mu);
  return impl_->proc && impl_->proc->running();
}

const McpServer& McpClient::server() const { return impl_->server; }

std::string McpClient::protocol_version() const {
  std::lock_guard lock(impl_->mu);
  return impl_->version;
}

Json McpClient::server_info() const {
  std::lock_guard lock(impl_->mu);
  return impl_->info;
}

int McpClient::starts() const {
  std::lock_guard lock(impl_->mu);
  return impl_->starts;
}

}  // namespace kernex::mcp
