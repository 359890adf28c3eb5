// Trajectories in day segments: runs of one process share a segment (interleaved, read back apart
// by id), roll over at the size limit, survive a kill -9 of the writer with every acknowledged
// event readable, and a reader never shows a line that is not the run's own (garbage, torn lines,
// a lying index, another tenant's folder). Older per-run files stay readable beside them.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "kernex/trajectory.hpp"
#include "kernex/trajectory_segments.hpp"
#include "kernex/trajectory_view.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using kernex::Json;
using kernex::testing::TempDir;

// Child mode (before gtest's main): record events of one run under KERNEX_TRAJ_CHILD_DIR and
// after each record() returns tell the parent, on fd 3, how many were acknowledged; forever,
// until the parent's SIGKILL.
const bool kChild = [] {
  const char* dir = std::getenv("KERNEX_TRAJ_CHILD_DIR");
  if (dir == nullptr) return false;
  auto t = kernex::open_trajectory_segmented(dir, 1 << 20, 1 << 20);
  if (!t) _exit(2);
  const std::string id = (*t)->run_id() + "\n";
  if (::write(3, id.data(), id.size()) != static_cast<ssize_t>(id.size())) _exit(3);
  const std::string filler(3000, 'x');
  for (std::uint32_t n = 0;; ++n) {
    (*t)->record("tool_call", {{"n", n}, {"result", filler}});
    if (::write(3, &n, sizeof n) != sizeof n) _exit(4);
  }
}();

// Child mode: post one run_start under KERNEX_TRAJ_POST_DIR, tell the parent its run id on fd 3,
// and exit at once: the log's end writes what is still queued.
const bool kPostChild = [] {
  const char* dir = std::getenv("KERNEX_TRAJ_POST_DIR");
  if (dir == nullptr) return false;
  auto t = kernex::open_trajectory_segmented(dir, 1 << 20, 1 << 20);
  if (!t) _exit(2);
  (*t)->record_soon("run_start", {{"posted", true}});
  const std::string id = (*t)->run_id() + "\n";
  if (::write(3, id.data(), id.size()) != static_cast<ssize_t>(id.size())) _exit(3);
  std::exit(0);
}();

std::vector<fs::path> files_in(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ext) out.push_back(e.path());
  return out;
}

std::vector<Json> events_of(const fs::path& dir, const std::string& run) {
  auto events = kernex::read_trajectory(dir, run);
  EXPECT_TRUE(events) << events.error().describe();
  return events ? *events : std::vector<Json>{};
}

std::shared_ptr<kernex::Trajectory> open_run(
    const fs::path& dir, std::size_t segment_bytes = kernex::kTrajectorySegmentBytes) {
  auto t = kernex::open_trajectory_segmented(dir, 256 * 1024, segment_bytes);
  EXPECT_TRUE(t) << t.error().describe();
  return *t;
}

void append(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::app) << text;
}

TEST(TrajectorySegments, ConcurrentRunsInterleaveInOneSegmentAndReadBackApart) {
  TempDir dir;
  constexpr int kRuns = 8, kEvents = 60;
  std::vector<std::shared_ptr<kernex::Trajectory>> runs;
  for (int r = 0; r < kRuns; ++r) runs.push_back(open_run(dir.path()));
  std::vector<std::thread> threads;
  for (int r = 0; r < kRuns; ++r) {
    threads.emplace_back([&, r] {
      for (int i = 0; i < kEvents; ++i) runs[r]->record("tool_call", {{"run", r}, {"i", i}});
    });
  }
  for (auto& t : threads) t.join();

  const auto segments = files_in(dir.path(), ".jsonl");
  ASSERT_EQ(segments.size(), 1u) << "one segment for every run of the day";
  EXPECT_EQ(files_in(dir.path(), ".idx").size(), 1u);
  for (int r = 0; r < kRuns; ++r) {
    const auto events = events_of(dir.path(), runs[r]->run_id());
    ASSERT_EQ(events.size(), static_cast<std::size_t>(kEvents)) << r;
    for (int i = 0; i < kEvents; ++i) {
      EXPECT_EQ(events[i]["run"], r);
      EXPECT_EQ(events[i]["i"], i);
      EXPECT_EQ(events[i]["seq"], i);
    }
  }
  auto listed = kernex::list_trajectories(dir.path());
  ASSERT_TRUE(listed) << listed.error().describe();
  ASSERT_EQ(listed->size(), static_cast<std::size_t>(kRuns));
  for (const auto& s : *listed) EXPECT_EQ(s.events, static_cast<std::size_t>(kEvents));
}

// A run's events once its posted lines are written by the log's thread (a bounded wait for that
// write, polled: nothing else signals it).
std::vector<Json> posted_events(const fs::path& dir, const std::string& run) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    auto read = kernex::read_trajectory(dir, run);  // no such run until its line is written
    if ((read && !read->empty()) || std::chrono::steady_clock::now() >= deadline)
      return read ? *read : std::vector<Json>{};
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// record_soon (a run's run_start in serve) does not wait: the log's own thread writes the line,
// and a later record() of any run returns only once every line posted before it is written, in
// each run's order.
TEST(TrajectorySegments, APostedEventIsWrittenByTheLogAndBeforeEveryLaterRecord) {
  TempDir dir;
  constexpr int kRuns = 16;
  std::vector<std::shared_ptr<kernex::Trajectory>> runs;
  for (int r = 0; r < kRuns; ++r) runs.push_back(open_run(dir.path()));
  std::vector<std::thread> threads;
  std::atomic<int> missing{0};
  for (int r = 0; r < kRuns; ++r) {
    threads.emplace_back([&, r] {
      runs[r]->record_soon("run_start", {{"run", r}});
      runs[r]->record("tool_call", {{"run", r}});
      // Acknowledged by record(): both lines are in the file now, whoever wrote the first.
      auto events = kernex::read_trajectory(dir.path(), runs[r]->run_id());
      if (!events || events->size() != 2 || (*events)[0]["type"] != "run_start" ||
          (*events)[0]["seq"] != 0 || (*events)[1]["seq"] != 1)
        ++missing;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(missing.load(), 0);

  // Posted alone, nothing after it: the log's thread writes it.
  auto alone = open_run(dir.path());
  alone->record_soon("run_start", {{"alone", true}});
  const auto events = posted_events(dir.path(), alone->run_id());
  ASSERT_EQ(events.size(), 1u) << "a posted line was never written";
  EXPECT_EQ(events[0]["alone"], true);
}

// Lines posted while another run's records keep the writer busy batch after batch: none is left
// in the queue once the busy run stops.
TEST(TrajectorySegments, LinesPostedDuringOtherRunsBatchesAreAllWritten) {
  TempDir dir;
  auto busy = open_run(dir.path());
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop; ++i) busy->record("tool_call", {{"i", i}});
  });
  std::vector<std::shared_ptr<kernex::Trajectory>> posted;
  for (int r = 0; r < 200; ++r) {
    posted.push_back(open_run(dir.path()));
    posted.back()->record_soon("run_start", {{"r", r}});
  }
  stop = true;
  writer.join();
  for (const auto& t : posted) ASSERT_EQ(posted_events(dir.path(), t->run_id()).size(), 1u);
}

// flush_trajectories (a forget calls it before cutting runs out) returns with every posted line
// in the file, and a forget finds a run by its posted run_start.
TEST(TrajectorySegments, AFlushWritesEveryPostedLineAndAForgetFindsThem) {
  TempDir dir;
  std::vector<std::shared_ptr<kernex::Trajectory>> posted;
  for (int r = 0; r < 100; ++r) {
    posted.push_back(open_run(dir.path()));
    posted.back()->record_soon("run_start", {{"session_id", r % 2 ? "odd" : "even"}});
  }
  kernex::flush_trajectories();
  for (const auto& t : posted) {
    auto events = kernex::read_trajectory(dir.path(), t->run_id());
    ASSERT_TRUE(events && events->size() == 1u) << t->run_id();
  }
  auto more = open_run(dir.path());
  more->record_soon("run_start", {{"session_id", "odd"}});
  std::size_t cut = 0;
  for (const auto& day : fs::directory_iterator(dir.path())) {
    auto removed = kernex::remove_day_runs(
        day.path(), [](const Json& start) { return start.value("session_id", "") == "odd"; });
    ASSERT_TRUE(removed) << removed.error().describe();
    cut += *removed;
  }
  EXPECT_EQ(cut, 51u) << "the run posted just before the forget is cut too";
  EXPECT_FALSE(kernex::read_trajectory(dir.path(), more->run_id()));
}

TEST(TrajectorySegments, LookupByIdPrefixAndLastBesideOlderPerRunFiles) {
  TempDir dir;
  // An older data dir's file per run: still listed and found.
  dir.write("20200101T000000Z-0000aa.jsonl",
            Json{{"seq", 0}, {"type", "run_start"}, {"question", "old"}}.dump() + "\n");
  std::vector<std::string> ids;
  for (int r = 0; r < 5; ++r) {
    auto t = open_run(dir.path());
    t->record("run_start", {{"run_id", t->run_id()}, {"question", "q" + std::to_string(r)}});
    t->record("run_end", {{"outcome", "end_turn"}});
    ids.push_back(t->run_id());
  }
  for (int r = 0; r < 5; ++r) {
    auto events = events_of(dir.path(), ids[r]);
    ASSERT_EQ(events.size(), 2u);
    EXPECT_EQ(events[0]["question"], "q" + std::to_string(r));
    EXPECT_EQ(events[1]["type"], "run_end");
  }
  EXPECT_EQ(events_of(dir.path(), "20200101T000000Z-0000aa")[0]["question"], "old");
  EXPECT_EQ(events_of(dir.path(), "2020")[0]["question"], "old");  // a unique prefix
  std::string last = *std::max_element(ids.begin(), ids.end());
  EXPECT_EQ(events_of(dir.path(), "last")[0]["run_id"], last);

  auto ambiguous = kernex::read_trajectory(dir.path(), "20");
  ASSERT_FALSE(ambiguous);
  EXPECT_NE(ambiguous.error().message.find("matches 6 runs"), std::string::npos)
      << ambiguous.error().message;
  auto missing = kernex::read_trajectory(dir.path(), "20991231T000000Z-000000");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("no run"), std::string::npos);

  auto listed = kernex::list_trajectories(dir.path());
  ASSERT_TRUE(listed) << listed.error().describe();
  ASSERT_EQ(listed->size(), 6u);
  EXPECT_EQ(listed->front().question, "old");
  EXPECT_EQ(listed->back().run_id, last);
  EXPECT_EQ(listed->back().outcome, "end_turn");
}

TEST(TrajectorySegments, RollsOverAtTheSizeLimitAndARunReadsBackAcrossSegments) {
  TempDir dir;
  auto a = open_run(dir.path(), 4096);
  auto b = open_run(dir.path(), 4096);
  const std::string text(200, 'y');
  for (int i = 0; i < 100; ++i) {
    a->record("tool_call", {{"i", i}, {"result", text}});
    b->record("tool_call", {{"i", i}, {"result", text}});
  }
  const auto segments = files_in(dir.path(), ".jsonl");
  EXPECT_GE(segments.size(), 10u);
  for (const auto& s : segments) EXPECT_LE(fs::file_size(s), 4096u) << s;
  for (const auto& t : {a, b}) {
    const auto events = events_of(dir.path(), t->run_id());
    ASSERT_EQ(events.size(), 100u);
    for (int i = 0; i < 100; ++i) EXPECT_EQ(events[i]["i"], i);
  }
  auto listed = kernex::list_trajectories(dir.path());
  ASSERT_TRUE(listed) << listed.error().describe();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ(listed->at(0).events, 100u);
}

// Starts this test binary in child mode; returns its pid and the read end of its fd 3.
std::pair<pid_t, int> spawn_writer(const fs::path& dir,
                                   const std::string& mode = "KERNEX_TRAJ_CHILD_DIR") {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.push_back(mode + "=" + dir.string());
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = fs::read_symlink("/proc/self/exe").string();
  char* argv[] = {self.data(), nullptr};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 3);
    ::execve(self.c_str(), argv, envp.data());
    _exit(127);
  }
  ::close(fds[1]);
  return {pid, fds[0]};
}

bool read_exact(int fd, void* buf, std::size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t got = ::read(fd, p, n);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

TEST(TrajectorySegments, KillNineLosesNoAcknowledgedEventAndATornTailIsSkipped) {
  TempDir dir;
  auto [pid, fd] = spawn_writer(dir.path());
  ASSERT_GT(pid, 0);
  char id_buf[24] = {};
  ASSERT_TRUE(read_exact(fd, id_buf, 24)) << "the child did not start";
  const std::string id(id_buf, 23);
  std::uint32_t acked = 0, n = 0;
  while (acked < 300 && read_exact(fd, &n, sizeof n)) acked = n + 1;
  ::kill(pid, SIGKILL);
  // Whatever it acknowledged before the kill, as the pipe tells after it.
  while (read_exact(fd, &n, sizeof n)) acked = n + 1;
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  ::close(fd);
  ASSERT_GE(acked, 300u);

  const auto segments = files_in(dir.path(), ".jsonl");
  ASSERT_EQ(segments.size(), 1u);
  // A write cut by the kill, then garbage and a line of another run pretending to be torn.
  append(segments[0], std::string(R"({"r":")") + id + R"(","e":{"seq":999999,"type":"tool_c)");
  append(segments[0], "\n\x01garbage\n[1,2]\n{\"r\":\"" + id + "\",\"e\":\"not an object\"}\n");
  const auto events = events_of(dir.path(), id);
  ASSERT_GE(events.size(), acked);
  for (std::size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i]["seq"], i);
    EXPECT_EQ(events[i]["n"], i);
  }

  // The next process's runs go to a segment of their own and the dead one stays readable.
  auto next = open_run(dir.path());
  next->record("run_start", {{"question", "after"}});
  EXPECT_EQ(files_in(dir.path(), ".jsonl").size(), 2u);
  EXPECT_EQ(events_of(dir.path(), next->run_id())[0]["question"], "after");
  EXPECT_GE(events_of(dir.path(), id).size(), acked);
}

// A child forked without exec may have been copied while another thread held the log's lock:
// there record() returns at once and writes nothing, and the parent's log goes on.
// A process that exits right after posting (a `kernex run` that failed before its next event):
// the log's end writes the line.
TEST(TrajectorySegments, APostedLineIsWrittenWhenTheProcessExits) {
  TempDir dir;
  auto [pid, fd] = spawn_writer(dir.path(), "KERNEX_TRAJ_POST_DIR");
  char id_buf[24] = {};
  ASSERT_TRUE(read_exact(fd, id_buf, 24)) << "the child did not start";
  ::close(fd);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const auto events = events_of(dir.path(), std::string(id_buf, 23));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["posted"], true);
}

TEST(TrajectorySegments, AForkedChildWritesNothingAndNeverHangs) {
  TempDir dir;
  auto t = open_run(dir.path());
  t->record("run_start", {{"who", "parent"}});
  int done[2];
  ASSERT_EQ(::pipe(done), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    t->record("tool_call", {{"who", "child"}});
    const char byte = 'x';
    _exit(::write(done[1], &byte, 1) == 1 ? 0 : 1);
  }
  ::close(done[1]);
  pollfd ready{done[0], POLLIN, 0};
  const bool returned = ::poll(&ready, 1, 10000) == 1;  // a deadline: a hung child fails the test
  if (!returned) ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ::close(done[0]);
  ASSERT_TRUE(returned) << "the forked child's record() hung";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  t->record("run_end", {{"who", "parent"}});
  const auto events = events_of(dir.path(), t->run_id());
  ASSERT_EQ(events.size(), 2u) << "the child's event was written, or the parent's were lost";
  EXPECT_EQ(events[0]["who"], "parent");
  EXPECT_EQ(events[1]["type"], "run_end");
}

// seq, ts_ms and type are the recorder's: fields of those names from a caller never replace them
// (readers order a run's events by seq and tell them apart by type).
TEST(TrajectorySegments, TheRecordersOwnFieldsWinOverACallersOfTheSameName) {
  TempDir dir;
  auto t = open_run(dir.path());
  t->record("run_start", {{"question", "q"}});
  t->record("tool_call", {{"seq", 0}, {"type", "run_end"}, {"ts_ms", "never"}, {"name", "x"}});
  const auto events = events_of(dir.path(), t->run_id());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1]["seq"], 1);
  EXPECT_EQ(events[1]["type"], "tool_call");
  EXPECT_TRUE(events[1]["ts_ms"].is_number());
  EXPECT_EQ(events[1]["name"], "x");
}

TEST(TrajectorySegments, AReaderShowsOnlyTheRunsOwnLinesWhateverTheFilesSay) {
  TempDir dir;
  const fs::path t1 = dir / "serve" / "t1" / "s", t2 = dir / "serve" / "t2" / "s";
  auto mine = open_run(t1);
  auto other = open_run(t1);
  auto foreign = open_run(t2);
  mine->record("run_start", {{"question", "mine"}});
  other->record("run_start", {{"question", "OTHER-RUN"}});
  foreign->record("run_start", {{"question", "OTHER-TENANT"}});
  mine->record("run_end", {{"outcome", "end_turn"}});

  // Another tenant's run is not found from this tenant's folder.
  EXPECT_FALSE(kernex::read_trajectory(t1, foreign->run_id()));
  ASSERT_EQ(events_of(t2, foreign->run_id()).size(), 1u);

  const auto segments = files_in(t1, ".jsonl");
  ASSERT_EQ(segments.size(), 1u);
  fs::path idx = segments[0];
  idx.replace_extension(".idx");
  // A lying index: the other run's bytes claimed for mine, ranges past the end, nonsense.
  const auto size = fs::file_size(segments[0]);
  append(idx, mine->run_id() + " 0 " + std::to_string(size) + "\n" + mine->run_id() + " " +
                  std::to_string(size) + " 99999\n" + mine->run_id() + " -1 5\nnot an index\n" +
                  mine->run_id() + " 184467440737095516150 1\n");
  // A planted day folder with a symlinked segment to a file outside.
  const fs::path outside = dir.write(
      "outside.jsonl", "{\"r\":\"" + mine->run_id() + "\",\"e\":{\"question\":\"PLANTED\"}}\n");
  fs::create_directories(t1 / "2001-01-01");
  fs::create_symlink(outside, segments[0].parent_path() / "seg-77.jsonl");
  const auto events = events_of(t1, mine->run_id());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["question"], "mine");
  EXPECT_EQ(events[1]["type"], "run_end");
  EXPECT_EQ(events_of(t1, other->run_id()).size(), 1u);
}

TEST(TrajectorySegments, ALostIndexOrARemovedFolderCostsAScanNeverAnEvent) {
  TempDir dir;
  auto a = open_run(dir.path());
  a->record("run_start", {{"question", "a"}});
  for (const auto& idx : files_in(dir.path(), ".idx")) fs::remove(idx);
  a->record("run_end", {{"outcome", "end_turn"}});  // its index line goes to the removed file
  EXPECT_EQ(events_of(dir.path(), a->run_id()).size(), 2u);

  // Forgetting a session removes its folder under a running writer: the next event makes a new
  // segment instead of going to a removed file.
  fs::remove_all(dir.path());
  auto b = open_run(dir.path());
  b->record("run_start", {{"question", "b"}});
  a->record("tool_call", {{"name", "after"}});
  EXPECT_EQ(events_of(dir.path(), b->run_id()).size(), 1u);
  EXPECT_EQ(events_of(dir.path(), a->run_id()).size(), 1u);
}

TEST(TrajectorySegments, ForgettingAConversationCutsItsRunsOutOfSharedSegments) {
  TempDir dir;
  auto gone = open_run(dir.path(), 2048);
  auto kept = open_run(dir.path(), 2048);
  gone->record("run_start", {{"conversation_id", "c-gone"}, {"question", "FORGET-ME"}});
  kept->record("run_start", {{"conversation_id", "c-kept"}, {"question", "keep me"}});
  for (int i = 0; i < 30; ++i) {  // past several rollovers
    gone->record("tool_call", {{"i", i}, {"result", std::string(100, 'g') + "FORGET-ME"}});
    kept->record("tool_call", {{"i", i}, {"result", std::string(100, 'k')}});
  }
  std::size_t removed = 0;
  for (const auto& day : fs::directory_iterator(dir.path())) {
    auto cut = kernex::remove_day_runs(day.path(), [](const Json& start) {
      return start.value("conversation_id", "") == "c-gone";
    });
    ASSERT_TRUE(cut) << cut.error().describe();
    removed += *cut;
  }
  EXPECT_EQ(removed, 1u);
  for (const auto& e : fs::recursive_directory_iterator(dir.path())) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(text.find("FORGET-ME"), std::string::npos) << e.path();
    EXPECT_EQ(text.find(gone->run_id()), std::string::npos) << e.path();
  }
  EXPECT_FALSE(kernex::read_trajectory(dir.path(), gone->run_id()));
  EXPECT_EQ(events_of(dir.path(), kept->run_id()).size(), 31u);
  // The writer notices its segment was replaced and goes on in a new one.
  kept->record("run_end", {{"outcome", "end_turn"}});
  EXPECT_EQ(events_of(dir.path(), kept->run_id()).size(), 32u);
}

// `kernex memory forget` beside a live writer (kernex serve): every line the writer appended while
// the segment was being rewritten is still there after.
TEST(TrajectorySegments, ForgettingUnderALiveWriterLosesNoLineOfTheOthers) {
  TempDir dir;
  auto kept = open_run(dir.path());
  kept->record("run_start", {{"conversation_id", "c-kept"}});
  const fs::path day = dir / *kernex::trajectory_day(kept->run_id());
  std::atomic<bool> stop{false};
  int acked = 0;
  std::thread writer([&] {
    for (; !stop; ++acked) kept->record("tool_call", {{"i", acked}});
  });
  std::size_t removed = 0;
  for (int round = 0; round < 8; ++round) {
    auto gone = open_run(dir.path());
    gone->record("run_start", {{"conversation_id", "c-gone"}});
    auto cut = kernex::remove_day_runs(
        day, [](const Json& start) { return start.value("conversation_id", "") == "c-gone"; });
    EXPECT_TRUE(cut) << cut.error().describe();
    removed += cut.value_or(0);
  }
  stop = true;
  writer.join();
  EXPECT_EQ(removed, 8u);
  const auto events = events_of(dir.path(), kept->run_id());
  ASSERT_EQ(events.size(), static_cast<std::size_t>(acked + 1)) << "lines lost to the rewrites";
  for (int i = 0; i < acked; ++i) ASSERT_EQ(events[i + 1]["i"], i);
}

// Planted names in a day folder: a segment numbered at the very top makes the writer go on at a
// number the readers list (not past it), and names that are no segment are left alone by both.
TEST(TrajectorySegments, PlantedSegmentNamesNeverHideAWritersLines) {
  TempDir dir;
  auto run = open_run(dir.path(), 2048);
  run->record("run_start", {{"question", "q"}});
  const fs::path day = dir / *kernex::trajectory_day(run->run_id());
  const std::string top = std::to_string(kernex::kMaxTrajectorySegment);
  const std::set<std::string> planted = {"seg-" + top + ".jsonl", "seg-" + top + ".idx",
                                         "seg-1" + top + ".jsonl",
                                         "seg-99999999999999999999999.jsonl", "seg-0002.jsonl"};
  for (const auto& name : planted) append(day / name, "{\"r\":\"planted\"}\n");
  for (int i = 0; i < 40; ++i)  // several rollovers, each claiming a new segment
    run->record("tool_call", {{"i", i}, {"result", std::string(200, 'x')}});
  const auto events = events_of(dir.path(), run->run_id());
  ASSERT_EQ(events.size(), 41u);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(events[i + 1]["i"], i);
  // Every file the writer made is one the readers take for a segment.
  std::size_t segments = 0;
  for (const auto& e : fs::directory_iterator(day)) {
    const std::string name = e.path().filename().string();
    if (planted.contains(name) || name == kernex::kTrajectoryDayLock) continue;
    EXPECT_TRUE(kernex::trajectory_segment_number(name)) << name;
    segments += name.ends_with(".jsonl");
  }
  EXPECT_GT(segments, 3u) << "the writer rolled over";
  auto listed = kernex::list_trajectories(dir.path());
  ASSERT_TRUE(listed) << listed.error().describe();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().events, 41u);
}

TEST(TrajectorySegments, DayAndSegmentNamesAreStrict) {
  EXPECT_EQ(kernex::trajectory_day("20261129T070000Z-abcdef"), "2026-11-29");
  EXPECT_FALSE(kernex::trajectory_day("2026112"));
  EXPECT_FALSE(kernex::trajectory_day("last"));
  EXPECT_TRUE(kernex::is_trajectory_day_dir("2026-11-29"));
  EXPECT_FALSE(kernex::is_trajectory_day_dir("2026-11-2x"));
  EXPECT_EQ(kernex::trajectory_segment_number("seg-12.jsonl"), 12u);
  EXPECT_EQ(kernex::trajectory_segment_number("seg-3.idx"), 3u);
  for (const char* bad : {"seg-0.jsonl", "seg-01.jsonl", "seg-.jsonl", "seg-1.jsonl.tmp",
                          "seg-99999999999999.jsonl", "seg-1000000000000.jsonl", "seg-1a.jsonl"})
    EXPECT_FALSE(kernex::trajectory_segment_number(bad)) << bad;
  EXPECT_TRUE(kernex::is_trajectory_run_id("20261129T070000Z-abcdef"));
  for (const char* bad : {"20261129T070000Z-abcdeg", "20261129T070000Z-abcde", "../../etc",
                          "20261129X070000Z-abcdef", ""})
    EXPECT_FALSE(kernex::is_trajectory_run_id(bad)) << bad;
}

}  // namespace
