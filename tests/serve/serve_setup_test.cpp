// Issue 33, setup: `kernex serve` takes --provider/--model/--provider-opt as `kernex run` does, and
// a server without a usable provider does not start (rather than answering every message 502).
#include <gtest/gtest.h>

#include "serve_harness.hpp"

namespace {

using namespace kernex::serve_test;

ProgramOutcome serve_once(ServeWorld& w, const std::vector<std::string>& extra) {
  std::vector<std::string> args{"serve",       "--config",   w.config.string(),  "--listen",
                                "127.0.0.1:0", "--data-dir", w.data_dir.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_kernex(args, w.dir.path());
}

TEST(ServeSetup, NoProviderRefusesToStartAndSaysHow) {
  ServeWorld w;
  w.write_config("");
  auto out = serve_once(w, {});
  EXPECT_NE(out.exit_code, 0);
  EXPECT_NE(out.err.find("--provider NAME"), std::string::npos) << out.err;
  EXPECT_NE(out.err.find("provider:"), std::string::npos) << out.err;
}

TEST(ServeSetup, AnUnusableProviderRefusesToStartNamingTheProblem) {
  ServeWorld w;
  w.write_config("");
  // A remote host over plain http, without the opt-in.
  auto out = serve_once(w, {"--provider", "openai", "--provider-opt",
                            "base_url=http://vllm.invalid:8000/v1", "--provider-opt", "api_key=k"});
  EXPECT_NE(out.exit_code, 0);
  EXPECT_NE(out.err.find("allow_insecure_http"), std::string::npos) << out.err;
  auto model_alone = serve_once(w, {"--model", "m"});
  EXPECT_NE(model_alone.exit_code, 0);
  EXPECT_NE(model_alone.err.find("--provider"), std::string::npos) << model_alone.err;
}

// --provider and --model reach the runs the server starts: the fake model answers.
TEST(ServeSetup, ProviderAndModelFlagsServeRuns) {
  FakeLlm llm;
  llm.set_responder([](const FakeLlm::Request&) {
    return FakeLlm::Plan{{"from the flags"}, std::nullopt};
  });
  ServeWorld w;
  w.write_config("");
  ASSERT_TRUE(w.start({"--provider", "openai", "--model", "flag-model", "--provider-opt",
                       "base_url=" + llm.base_url(), "--provider-opt", "api_key=k"}));
  auto r = request(w.port(), "POST", "/v1/sessions/s1/messages", message_body("hi"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("from the flags"), std::string::npos) << r.body;
}

// allow_insecure_http: a non-loopback http base_url is accepted and the start warns about it.
TEST(ServeSetup, AllowInsecureHttpStartsWithAWarning) {
  ServeWorld w;
  w.write_config(
      "provider:\n  name: openai\n  options:\n    base_url: http://vllm.invalid:8000/v1\n"
      "    allow_insecure_http: true\n");
  ASSERT_TRUE(w.start());
  EXPECT_NE(w.log().find("allow_insecure_http"), std::string::npos) << w.log();
  auto health = request(w.port(), "GET", "/healthz");
  EXPECT_EQ(health.status, 200) << health.body;
}

}  // namespace
