// Appends one JSON line per executed tool call to an audit file (config: `file`, required;
// `max_result_bytes`, default 4096: longer results are cut and marked).
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fcntl.h>
#include <mutex>
#include <stdexcept>
#include <unistd.h>

#include "kernex/number.hpp"
#include "kernex/plugin.hpp"
#include "kernex/redact.hpp"

namespace {

using kernex::ErrorCode;
using kernex::Json;

std::string now_rfc3339() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

class AuditHook final : public kernex::HookRunner {
 public:
  AuditHook(int fd, std::size_t max_result) : fd_(fd), max_result_(max_result) {}
  ~AuditHook() override { ::close(fd_); }

  void post_tool(const kernex::HookScope& scope, const kernex::ToolCall& call,
                 kernex::ToolResult& result) override {
    std::string content = result.content;
    bool truncated = false;
    if (content.size() > max_result_) {
      content.resize(max_result_);
      truncated = true;
    }
    Json line{{"ts", now_rfc3339()},         {"session", scope.session_id},
              {"sender", scope.sender_id},   {"agent", scope.agent_name},
              {"tool", call.name},           {"call_id", call.id},
              {"arguments", call.arguments}, {"result", content},
              {"is_error", result.is_error}, {"truncated", truncated}};
    // Invalid UTF-8 from a tool must not stop the audit: replace it rather than throw.
    std::string text =
        kernex::redact_secrets_in_json(line.dump(-1, ' ', false, Json::error_handler_t::replace),
                                       kernex::kSecretPieceMin) +
        "\n";
    std::lock_guard lock(mutex_);
    // One write per line on an O_APPEND fd keeps lines whole across processes.
    if (::write(fd_, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      throw std::runtime_error("audit: short write to the audit file");
    }
  }

 private:
  int fd_;
  std::size_t max_result_;
  std::mutex mutex_;
};

kernex::Result<std::shared_ptr<kernex::HookRunner>> make_audit(const Json& config) {
  if (!config.is_object() || !config.contains("file") || !config.at("file").is_string()) {
    return kernex::fail(ErrorCode::Config,
                        "audit: option `file` (path of the JSON Lines audit log) is required");
  }
  for (const auto& [key, value] : config.items()) {
    if (key != "file" && key != "max_result_bytes") {
      return kernex::fail(ErrorCode::Config,
                          "audit: unknown option `" + key + "` (expected file, max_result_bytes)");
    }
  }
  std::size_t max_result = 4096;
  if (config.contains("max_result_bytes")) {
    KERNEX_ASSIGN_OR_RETURN(
        max_result, kernex::checked_uint(config.at("max_result_bytes"), "audit: max_result_bytes",
                                         0, std::uint64_t{1} << 30));
  }
  const std::string path = config.at("file").get<std::string>();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0)
    return kernex::fail(ErrorCode::Config, "audit: cannot open " + path + " for appending");
  return std::make_shared<AuditHook>(fd, max_result);
}

}  // namespace

KERNEX_PLUGIN(Hook, "audit", "1.0.0", "Appends one JSON line per tool call to a file", make_audit)
