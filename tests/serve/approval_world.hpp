// A `kernex serve` world for approvals (tests/serve/serve_approvals_test.cpp and
// bench/approval_restarts.cpp): the `tally` fixture skill (a tool that appends one line per run
// to tally.txt, and `stall`, which blocks), `permissions: {ask: [tally], deny:
// [tally(*forbidden*)]}`, a replay script that can be rewritten between a kill -9 and the next
// start, and the kill -9 trial: the server dies while an approval waits, starts again, the approval
// is given, and the tool must have run exactly once.
#pragma once

#include <string>
#include <vector>

#include "serve_harness.hpp"

namespace kernex::serve_test {

struct ApprovalWorld {
  ServeWorld w;
  fs::path script = w.dir.path() / "script.jsonl";
  fs::path record = w.dir.path() / "record.jsonl";

  // Config with the tally skill trusted; `serve_body` is the serve: section's body.
  bool configure(const std::string& script_text, const std::string& serve_body = "") {
    set_script(script_text);
    const std::string skills = std::string(KERNEX_SERVE_FIXTURES) + "/skills";
    w.write_config(
        "provider:\n  name: replay\n  options:\n    script: " + script.string() +
            "\n    record: " + record.string() + "\n",
        serve_body,
        "skill_dirs:\n  - " + skills + "\ntoolboxes:\n  - name: script\n" +
            "    options:\n      timeout: 60\n" +
            "permissions:\n  ask:\n    - tally\n  deny:\n    - \"tally(*forbidden*)\"\n");
    auto trust = run_kernex({"skills", "trust", "--config", w.config.string(), skills + "/tally"},
                            w.dir.path());
    if (trust.exit_code != 0) ADD_FAILURE() << "skills trust: " << trust.out << trust.err;
    return trust.exit_code == 0;
  }
  // What the (replay) provider answers from the next start on.
  void set_script(const std::string& text) const { std::ofstream(script, std::ios::trunc) << text; }

  // The words the tally tool wrote, across every workspace, one per run of the tool.
  std::vector<std::string> tallied() const { return lines_of_files_named("tally.txt"); }
  std::vector<std::string> stalled() const { return lines_of_files_named("stall.txt"); }
  std::size_t provider_calls() const {
    std::ifstream in(record);
    std::size_t n = 0;
    for (std::string line; std::getline(in, line);) n += line.empty() ? 0 : 1;
    return n;
  }

  std::vector<std::string> lines_of_files_named(const std::string& name) const;
};

// The lines of every file named `name` under `dir` (every workspace, every node's).
inline std::vector<std::string> lines_of_files_named(const fs::path& dir, const std::string& name) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->path().filename() != name) continue;
    std::ifstream in(it->path());
    for (std::string line; std::getline(in, line);) out.push_back(line);
  }
  return out;
}

inline std::vector<std::string> ApprovalWorld::lines_of_files_named(const std::string& name) const {
  return serve_test::lines_of_files_named(w.dir.path(), name);
}

inline std::size_t count_of(const std::vector<std::string>& lines, const std::string& word) {
  return static_cast<std::size_t>(std::count(lines.begin(), lines.end(), word));
}

inline std::string tally_call(const std::string& word, const std::string& match = "") {
  return replay_tool_call("tally", Json{{"word", word}}, "t-" + word, match);
}

// The first event named `name` in `events` (its JSON), or null.
inline Json event_named(const std::vector<SseEvent>& events, const std::string& name) {
  for (const auto& e : events) {
    if (e.event == name) return e.json();
  }
  return nullptr;
}

struct TrialOutcome {
  bool resumed = false;       // the run ended done after the restart
  std::size_t tool_runs = 0;  // lines the trial's tally call wrote (1 is right)
  std::string error;          // what went wrong, when something did
};

// One kill -9 trial in session "trial<n>": the world's server runs with a script whose next
// plain line asks for tally(word "trial<n>"). The server is killed while the approval waits,
// started again with a script answering the resumed run's next turn ("done trial<n>") and then
// the next trial's call; the approval is given and the run must finish with one tally line.
inline TrialOutcome kill9_trial(ApprovalWorld& a, int n) {
  TrialOutcome out;
  auto failed = [&out](std::string why) {
    out.error = std::move(why);
    return out;
  };
  const std::string word = "trial" + std::to_string(n);
  const std::string session = word;
  SseReader sse(a.w.port(), "POST", "/v1/sessions/" + session + "/messages",
                message_body("please tally " + word, Json{{"stream", true}}));
  if (!sse.ok()) return failed("POST: " + sse.head().describe());
  std::vector<SseEvent> seen;
  if (!read_until(sse, "approval_requested", seen))
    return failed("no approval_requested before the kill");
  const Json asked = event_named(seen, "approval_requested");
  const std::string run = asked.value("run_id", "");
  const std::string approval = asked.value("approval_id", "");
  if (!a.w.server.kill9()) return failed("the server outlived kill -9");
  a.set_script(replay_text("done " + word) + tally_call("trial" + std::to_string(n + 1)));
  if (!a.w.start()) return failed("no restart: " + a.w.server.error());

  SseReader follow(a.w.port(), "GET", "/v1/runs/" + run + "/events", "");
  if (!follow.ok()) return failed("GET events: " + follow.head().describe());
  std::vector<SseEvent> after;
  if (!read_until(follow, "approval_requested", after))
    return failed("the resumed run did not wait for its approval");
  if (event_named(after, "approval_requested").value("approval_id", "") != approval)
    return failed("the resumed run asked a new approval");
  auto decided =
      request(a.w.port(), "POST", "/v1/approvals/" + approval, R"({"decision": "approve"})");
  if (decided.status != 200) return failed("approve: " + decided.describe());
  if (!read_until(follow, "run_end", after)) return failed("no run_end after approve");
  const Json end = after.back().json();
  out.resumed = end.value("outcome", "") == "end_turn" && end.value("text", "") == "done " + word;
  if (!out.resumed) out.error = "run ended " + after.back().data;
  out.tool_runs = count_of(a.tallied(), word);
  return out;
}

}  // namespace kernex::serve_test
