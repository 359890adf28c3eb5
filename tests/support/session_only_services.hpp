// RunServices that name a session (span "0", depth 0) and answer no query: the services of a run
// without a model, for tests that need a run's handles but no kernel run.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kernex/run_services.hpp"

namespace kernex::testing {

class SessionOnlyServices final : public RunServices {
 public:
  explicit SessionOnlyServices(std::string session) : session_(std::move(session)) {}
  std::uint32_t depth() const override { return 0; }
  const std::string& span() const override { return span_; }
  const std::string& session() const override { return session_; }
  bool can_query() const override { return false; }
  Result<std::string> llm_query(const std::string&, const std::optional<std::string>&) override {
    return fail(ErrorCode::Unsupported, "no model in this test");
  }
  std::vector<Result<std::string>> llm_query_batched(const std::vector<std::string>&,
                                                     const std::optional<std::string>&) override {
    return {};
  }
  Result<std::string> rlm_query(const std::string&, const std::optional<std::string>&) override {
    return fail(ErrorCode::Unsupported, "no model in this test");
  }

 private:
  std::string session_;
  std::string span_ = "0";
};

}  // namespace kernex::testing
