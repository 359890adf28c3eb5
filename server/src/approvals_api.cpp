// The approvals routes: a person's decision on a tool call a run waits for, and the list of
// those a session waits for. Strict: anything but the documented fields is a 400 naming them.
#include "api.hpp"
#include "approvals.hpp"

namespace kernex::server {
namespace {

ApiError invalid(const std::string& message) { return api_error(400, "invalid_request", message); }

constexpr std::size_t kMaxReasonBytes = 4096;

std::expected<ApprovalDecision, ApiError> parse_decision(const Json& body) {
  for (const auto& [key, value] : body.items()) {
    if (key != "decision" && key != "arguments" && key != "reason")
      return std::unexpected(
          invalid("unknown field '" + key + "' (expected decision, arguments, reason)"));
  }
  auto it = body.find("decision");
  auto verdict = it != body.end() && it->is_string()
                     ? parse_approval_verdict(it->get<std::string>())
                     : std::nullopt;
  if (!verdict) return std::unexpected(invalid("decision: expected approve, deny or always"));
  ApprovalDecision decision{*verdict, std::nullopt, {}};
  if (auto args = body.find("arguments"); args != body.end()) {
    if (!args->is_object())
      return std::unexpected(invalid("arguments: expected an object (the tool's arguments)"));
    if (*verdict == ApprovalVerdict::Deny)
      return std::unexpected(invalid("arguments: only with decision approve or always"));
    decision.arguments = *args;
  }
  if (auto reason = body.find("reason"); reason != body.end()) {
    if (!reason->is_string() || reason->get<std::string>().size() > kMaxReasonBytes)
      return std::unexpected(invalid("reason: expected a string of at most 4096 bytes"));
    decision.reason = reason->get<std::string>();
  }
  return decision;
}

ApiError no_approvals() {
  return api_error(501, "not_implemented", "this server's runs keep no approvals");
}

}  // namespace

HttpReply Api::post_approval(const HttpRequest& req, const std::string& tenant,
                             const std::string& id) {
  Approvals* approvals = deps_.runs->approvals();
  if (approvals == nullptr) return HttpReply::error(no_approvals());
  auto body = parse_body(req.body);
  if (!body) return HttpReply::error(body.error());
  auto decision = parse_decision(*body);
  if (!decision) return HttpReply::error(decision.error());
  auto resolved = approvals->decide(tenant, id, *decision);
  return resolved ? HttpReply::json(200, *resolved) : HttpReply::error(resolved.error());
}

HttpReply Api::session_approvals(const std::string& tenant, const std::string& session) {
  Approvals* approvals = deps_.runs->approvals();
  if (approvals == nullptr) return HttpReply::error(no_approvals());
  auto list = approvals->pending(tenant, session);
  return list ? HttpReply::json(200, *list) : HttpReply::error(list.error());
}

}  // namespace kernex::server
