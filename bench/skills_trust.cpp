// skills_trust: loading N skills that lie in a writable location (below /tmp, world-writable), all
// of them trusted, beside loading the same N while none is trusted (each is hashed, then refused
// without being parsed): same run, same files, the loader `kernex skills list` uses. Also times the
// one trust_skills() call that trusts all N (what `kernex skills trust DIR` does).
// Target: trusted <= 3x untrusted at 10 000 skills.
// With KERNEX_BENCH_BIN=path/to/kernex it also times that binary's `kernex skills list` (untrusted,
// then after its `kernex skills trust`), so two builds (before/after a change) compare on the same
// files. Usage: skills_trust [N...] (default 2500 10000). Medians of 3 runs, in seconds.
#include <spawn.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "kernex/skills/loader.hpp"
#include "kernex/skills/trust.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using namespace kernex::bench;

constexpr int kRounds = 3;

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
}

// N skill folders of three small files each, like a person's skills.
void make_skills(const fs::path& dir, int n) {
  for (int i = 0; i < n; ++i) {
    const std::string name = "skill-" + std::to_string(i);
    const fs::path folder = dir / name;
    fs::create_directories(folder);
    write(folder / "SKILL.md", "---\nname: " + name + "\ndescription: skill number " +
                                   std::to_string(i) + "\n---\nUse it when asked about " + name +
                                   ".\n");
    write(folder / "run.sh", "#!/bin/sh\necho " + name + "\n");
    write(folder / "notes.txt", std::string(200, 'n') + "\n");
  }
}

// Runs `$KERNEX_BENCH_BIN ARGS` with its output dropped; the seconds it took.
double run_kernex(const char* bin, const fs::path& config, const std::vector<std::string>& args) {
  std::vector<std::string> argv_s{bin};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s{"KERNEX_CONFIG=" + config.string(), "PATH=/usr/bin:/bin",
                                 "HOME=" + config.parent_path().string(),
                                 "ASAN_OPTIONS=detect_leaks=0"};
  std::vector<char*> env;
  for (auto& e : env_s) env.push_back(e.data());
  env.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  const auto start = Clock::now();
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), env.data()) != 0)
    die("skills_trust", std::string("cannot start ") + argv[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const double seconds = us_since(start) / 1e6;
  posix_spawn_file_actions_destroy(&actions);
  // list exits non-zero when skills were refused (the untrusted case); only a crash is fatal.
  if (!WIFEXITED(status)) die("skills_trust", "kernex " + args.front() + " did not exit");
  return seconds;
}

template <typename F>
double median_seconds(F&& f) {
  std::vector<double> times;
  for (int r = 0; r < kRounds; ++r) {
    const auto start = Clock::now();
    f();
    times.push_back(us_since(start) / 1e6);
  }
  return median(times);
}

void in_process(const fs::path& root, const fs::path& skills, int n) {
  namespace sk = kernex::skills;
  sk::TrustRule rule{root / "data" / std::string(sk::kTrustFileName), {root / "elsewhere"}};
  const sk::LoadOptions options{rule};
  auto load = [&](std::size_t want_loaded) {
    auto loaded = sk::load_skills({skills}, options);
    if (loaded.skills.size() != want_loaded)
      die("skills_trust", std::to_string(loaded.skills.size()) + " skills loaded, expected " +
                              std::to_string(want_loaded));
  };
  const double untrusted = median_seconds([&] { load(0); });
  std::vector<fs::path> folders;
  for (const auto& e : fs::directory_iterator(skills)) folders.push_back(e.path());
  const auto start = Clock::now();
  for (const auto& r : sk::trust_skills(rule.store, folders))
    if (!r) die("skills_trust", r.error().describe());
  const double trust = us_since(start) / 1e6;
  const double trusted = median_seconds([&] { load(static_cast<std::size_t>(n)); });
  std::printf(
      "%6d skills, load_skills: untrusted %7.3f s | trust all %7.3f s | trusted %7.3f s "
      "(%.2fx untrusted)\n",
      n, untrusted, trust, trusted, trusted / untrusted);
}

void with_binary(const char* bin, const fs::path& root, const fs::path& skills, int n) {
  const fs::path config = root / "kernex.yaml";
  write(config, "data_dir: " + (root / "cli-data").string() + "\n");
  const std::vector<std::string> list{"skills", "list", skills.string()};
  const double untrusted = median_seconds([&] { run_kernex(bin, config, list); });
  const double trust = run_kernex(bin, config, {"skills", "trust", skills.string()});
  const double trusted = median_seconds([&] { run_kernex(bin, config, list); });
  std::printf(
      "%6d skills, %s skills list: untrusted %7.2f s | trust all %7.2f s | trusted "
      "%7.2f s (%.2fx untrusted)\n",
      n, bin, untrusted, trust, trusted, trusted / untrusted);
}

void bench(int n) {
  char pattern[] = "/tmp/kernex-bench-trust-XXXXXX";
  if (::mkdtemp(pattern) == nullptr) die("skills_trust", "mkdtemp failed");
  const fs::path root = pattern;
  const fs::path skills = root / "skills";
  make_skills(skills, n);
  in_process(root, skills, n);
  if (const char* bin = std::getenv("KERNEX_BENCH_BIN")) with_binary(bin, root, skills, n);
  std::fflush(stdout);
  std::error_code ec;
  fs::remove_all(root, ec);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atoi(argv[i]));
  if (sizes.empty()) sizes = {2500, 10000};
  for (int n : sizes) bench(n);
  return 0;
}
