// approval_restarts: issue 22's durability target. N trials (default 100) of kill -9 of
// `kernex serve` while a tool call waits for approval; each time the server starts again on the
// same data dir, the approval is given, and the run must resume and run its tool exactly once.
// Beside it, the baseline: the same request and approval without a restart. Prints runs resumed,
// tools run twice (and never), and the median time of a trial of each kind.
//   approval_restarts [TRIALS]
// The trial itself is tests/serve/approval_world.hpp's, which serve_approvals_test also runs.
#include <cstdio>
#include <cstdlib>

#include "approval_world.hpp"
#include "bench_util.hpp"

namespace {

using namespace kernex::serve_test;
using kernex::Json;

// Request, approval, run_end in one server: the cost of a trial without the restart.
bool approve_in_place(ApprovalWorld& a, int n) {
  const std::string word = "base" + std::to_string(n);
  SseReader sse(a.w.port(), "POST", "/v1/sessions/" + word + "/messages",
                message_body("please tally " + word, Json{{"stream", true}}));
  std::vector<SseEvent> seen;
  if (!read_until(sse, "approval_requested", seen)) return false;
  const std::string id = event_named(seen, "approval_requested").value("approval_id", "");
  if (request(a.w.port(), "POST", "/v1/approvals/" + id, R"({"decision": "approve"})").status !=
      200)
    return false;
  return read_until(sse, "run_end", seen) && count_of(a.tallied(), word) == 1;
}

}  // namespace

int main(int argc, char** argv) {
  namespace bench = kernex::bench;
  const int trials = argc > 1 ? std::max(1, std::atoi(argv[1])) : 100;

  std::vector<double> base_ms;
  {
    ApprovalWorld a;
    std::string script;
    for (int n = 0; n < trials; ++n)
      script += tally_call("base" + std::to_string(n)) + replay_text("done");
    if (!a.configure(script) || !a.w.start()) bench::die("approval_restarts", "no baseline server");
    for (int n = 0; n < trials; ++n) {
      const auto t0 = bench::Clock::now();
      if (!approve_in_place(a, n))
        bench::die("approval_restarts", "baseline trial " + std::to_string(n) + " failed");
      base_ms.push_back(bench::us_since(t0) / 1000);
    }
  }

  ApprovalWorld a;
  if (!a.configure(tally_call("trial0")) || !a.w.start())
    bench::die("approval_restarts", "no server: " + a.w.server.error());
  int resumed = 0, twice = 0, never = 0, failed = 0;
  std::vector<double> kill_ms;
  for (int n = 0; n < trials; ++n) {
    const auto t0 = bench::Clock::now();
    TrialOutcome t = kill9_trial(a, n);
    kill_ms.push_back(bench::us_since(t0) / 1000);
    resumed += t.resumed ? 1 : 0;
    twice += t.tool_runs > 1 ? 1 : 0;
    never += t.tool_runs == 0 ? 1 : 0;
    if (!t.error.empty()) {
      ++failed;
      std::fprintf(stderr, "trial %d: %s\n", n, t.error.c_str());
      if (!a.w.server.running() && !a.w.start())
        bench::die("approval_restarts", "the server does not start again: " + a.w.log());
    }
  }
  std::printf("approval_restarts: %d kill -9 trials between approval_requested and the decision\n",
              trials);
  std::printf("  runs resumed and finished: %d / %d\n", resumed, trials);
  std::printf("  tools run twice:           %d\n", twice);
  std::printf("  tools never run:           %d\n", never);
  std::printf("  trials with an error:      %d\n", failed);
  std::printf(
      "  median trial: kill -9 + restart + approve %.1f ms; baseline (approve, no "
      "restart) %.1f ms\n",
      bench::median(kill_ms), bench::median(base_ms));
  return resumed == trials && twice == 0 ? 0 : 1;
}
