// Spawn cost of one toolbox round trip (JSON on stdin, the same JSON back on stdout, through
// /bin/cat) three ways, interleaved in one run so they see the same machine:
//   sandboxed  kernex::sandbox::ToolboxRunner::run: argv/env translation, Landlock + seccomp + no
//   caps
//              (policy cached as in the plugin), stdio pumped under a deadline, process group
//              reaped
//   bare       vfork + execve with two pipes, no isolation
//   bwrap      Debian's bubblewrap with comparable isolation (read-only /usr, unshared namespaces,
//              new session, no caps), spawned the bare way; skipped when bwrap is not installed
// All three start the command with the same environment, the sandbox's (PATH, HOME, LANG, TZ,
// TMPDIR
// ...), read once through the sandbox itself: execve copies it and the loader scans it, so a
// shorter one would flatter the baselines. Each runs idle, then again with 1 GiB of touched memory
// in this process (fork-based spawners slow down with the parent's size; vfork-style ones should
// not). Usage: spawn [ITERATIONS] [--git] (default 300). Prints medians (µs) and ratios. --git puts
// a `.git` directory in the workspace, so the policy gets a mount namespace that each child joins
// (the path every policy with a writable grant takes once writable mounts are made noexec there).
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kernex/sandbox/toolbox.hpp"

#include "bench_util.hpp"

namespace {

using kernex::bench::median;

namespace fs = std::filesystem;
namespace sb = kernex::sandbox;
using Clock = std::chrono::steady_clock;

// Keys in nlohmann::json order, so the sandboxed path (which re-serialises the arguments) sends the
// same bytes.
const std::string kInput = R"({"options":{"layout":true},"pages":[1,2,3],"path":"report.pdf"})";

// Bare round trip: vfork + execve, stdin written and stdout read with poll, then waitpid.
bool bare_round_trip(const std::vector<std::string>& argv_s, char* const* envp, std::string& out) {
  int in_pipe[2], out_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0) return false;
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return false;
  std::vector<char*> argv;
  for (const auto& a : argv_s) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = ::vfork();
  if (pid == 0) {
    ::dup2(in_pipe[0], 0);
    ::dup2(out_pipe[1], 1);
    ::execve(argv[0], argv.data(), const_cast<char**>(envp));
    ::_exit(127);
  }
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  if (pid < 0) return false;
  std::size_t written = 0;
  int wfd = in_pipe[1];
  out.clear();
  char buf[4096];
  for (;;) {
    pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {wfd, POLLOUT, 0}};
    ::poll(fds, wfd >= 0 ? 2 : 1, 10'000);
    if (wfd >= 0 && (fds[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t n = ::write(wfd, kInput.data() + written, kInput.size() - written);
      if (n > 0) written += static_cast<std::size_t>(n);
      if (n < 0 || written == kInput.size()) {
        ::close(wfd);
        wfd = -1;
      }
    }
    if (fds[0].revents & (POLLIN | POLLHUP)) {
      ssize_t n = ::read(out_pipe[0], buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
    }
  }
  if (wfd >= 0) ::close(wfd);
  ::close(out_pipe[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::optional<std::string> find_bwrap() {
  for (const char* p : {"/usr/bin/bwrap", "/bin/bwrap", "/usr/local/bin/bwrap"}) {
    if (::access(p, X_OK) == 0) return std::string(p);
  }
  return std::nullopt;
}

struct Medians {
  double sandboxed = 0, bare = 0, bwrap = 0;
};

Medians measure(int iterations, sb::ToolboxRunner& runner, const kernex::Toolbox& toolbox,
                const std::optional<std::string>& bwrap, const fs::path& workspace,
                char* const* envp) {
  std::vector<double> t_sandboxed, t_bare, t_bwrap;
  const std::vector<std::string> bare_argv = {"/bin/cat"};
  std::vector<std::string> bwrap_argv;
  if (bwrap) {
    bwrap_argv = {*bwrap,
                  "--ro-bind",
                  "/usr",
                  "/usr",
                  "--symlink",
                  "usr/bin",
                  "/bin",
                  "--symlink",
                  "usr/lib",
                  "/lib",
                  "--symlink",
                  "usr/lib64",
                  "/lib64",
                  "--dev",
                  "/dev",
                  "--tmpfs",
                  "/tmp",
                  "--bind",
                  workspace.string(),
                  workspace.string(),
                  "--chdir",
                  workspace.string(),
                  "--unshare-all",
                  "--new-session",
                  "--die-with-parent",
                  "--cap-drop",
                  "ALL",
                  "--",
                  "/bin/cat"};
  }
  const kernex::Json args = kernex::Json::parse(kInput);
  std::string out;
  auto micros = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
  };
  for (int i = 0; i < iterations; ++i) {
    auto t0 = Clock::now();
    auto r = runner.run(toolbox, kernex::ToolCall{"b", toolbox.name, args});
    auto t1 = Clock::now();
    if (r.is_error || r.content != kInput) {
      std::fprintf(stderr, "sandboxed round trip failed: %s\n", r.content.c_str());
      std::exit(1);
    }
    t_sandboxed.push_back(micros(t0, t1));

    t0 = Clock::now();
    bool ok = bare_round_trip(bare_argv, envp, out);
    t1 = Clock::now();
    if (!ok || out != kInput) {
      std::fprintf(stderr, "bare round trip failed\n");
      std::exit(1);
    }
    t_bare.push_back(micros(t0, t1));

    if (bwrap) {
      t0 = Clock::now();
      ok = bare_round_trip(bwrap_argv, envp, out);
      t1 = Clock::now();
      if (!ok || out != kInput) {
        std::fprintf(stderr, "bwrap round trip failed (output: %s)\n", out.c_str());
        std::exit(1);
      }
      t_bwrap.push_back(micros(t0, t1));
    }
  }
  return {median(t_sandboxed), median(t_bare), bwrap ? median(t_bwrap) : 0};
}

void print(const char* label, const Medians& m, bool have_bwrap) {
  std::printf("%-22s sandboxed %8.0f us   bare vfork+execve %8.0f us", label, m.sandboxed, m.bare);
  if (have_bwrap) std::printf("   bwrap %8.0f us", m.bwrap);
  std::printf("\n%-22s sandboxed/bare %.2f", "", m.sandboxed / m.bare);
  if (have_bwrap) std::printf("   sandboxed/bwrap %.2f", m.sandboxed / m.bwrap);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::max(1, std::atoi(argv[1])) : 300;
  const bool with_git = argc > 2 && std::strcmp(argv[2], "--git") == 0;
  std::string tmpl = (fs::temp_directory_path() / "kernex-bench-spawn-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) return 1;
  const fs::path workspace = fs::canonical(tmpl);
  if (with_git) fs::create_directories(workspace / ".git" / "hooks");

  sb::ToolboxRunOptions options;
  options.workspace = workspace;
  sb::ToolboxRunner runner(options);
  kernex::Toolbox toolbox;
  toolbox.name = "echo_json";
  toolbox.command = "cat";
  if (auto policy = runner.policy_for(toolbox); !policy) {
    std::fprintf(stderr, "the sandbox can't be set up here: %s\n",
                 policy.error().describe().c_str());
    return 1;
  }
  // The sandboxed child's environment, as the sandbox builds it (env -0: values may hold newlines).
  auto env_run =
      sb::spawn(**runner.policy_for(toolbox), sb::Command{{"env", "-0"}, {}, {}, {}, {}, {}, {}});
  if (!env_run || !env_run->success()) {
    std::fprintf(stderr, "cannot read the sandbox's environment\n");
    return 1;
  }
  std::vector<std::string> env_store;
  for (std::size_t pos = 0; pos < env_run->stdout_data.size();) {
    std::size_t end = env_run->stdout_data.find('\0', pos);
    if (end == std::string::npos) end = env_run->stdout_data.size();
    env_store.push_back(env_run->stdout_data.substr(pos, end - pos));
    pos = end + 1;
  }
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  const auto bwrap = find_bwrap();
  if (!bwrap)
    std::printf("bwrap not found: skipping the bubblewrap column (apt-get install bubblewrap)\n");
  std::printf(
      "round trip: %zu bytes of JSON through /bin/cat, %d iterations each, interleaved; "
      "medians%s\n",
      kInput.size(), iterations, with_git ? "; workspace with .git (mount namespace)" : "");
  std::printf("environment for all three (%zu variables):", env_store.size());
  for (const auto& e : env_store) std::printf(" %.*s", static_cast<int>(e.find('=')), e.c_str());
  std::printf("\n");

  measure(std::min(iterations, 20), runner, toolbox, bwrap, workspace, envp.data());  // warm caches
  const Medians idle = measure(iterations, runner, toolbox, bwrap, workspace, envp.data());
  print("idle parent", idle, bwrap.has_value());

  const std::size_t kGiB = std::size_t{1} << 30;
  char* ballast = static_cast<char*>(std::malloc(kGiB));
  if (ballast == nullptr) {
    std::printf("cannot allocate 1 GiB: skipping the loaded run\n");
  } else {
    std::memset(ballast, 1, kGiB);  // touch every page
    const Medians loaded = measure(iterations, runner, toolbox, bwrap, workspace, envp.data());
    print("parent holding 1 GiB", loaded, bwrap.has_value());
    std::printf("%-22s sandboxed loaded/idle %.2f\n", "", loaded.sandboxed / idle.sandboxed);
    volatile char sink = ballast[kGiB / 2];
    (void)sink;
    std::free(ballast);
  }
  std::error_code ec;
  fs::remove_all(workspace, ec);
  return 0;
}
