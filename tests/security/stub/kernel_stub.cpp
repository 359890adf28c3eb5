// A stand-in kernel for the process battery (battery2_processes_test.cpp): a process of its own
// that runs one sandboxed command the way the kernel does, so the test can kill it with SIGKILL and
// look at what is left. Usage:
//   kernel_stub spawn|process|spawn-unenforced WORKSPACE EXEC_DIR -- ARGV...
//       spawn(), SandboxedProcess::start or spawn() with enforce: false; prints "started" first
//   kernel_stub tmp EXEC_DIR       builds a policy, prints its private TMPDIR, then waits to be
//   killed kernel_stub build EXEC_DIR     builds a policy and runs /bin/true (reclaiming what dead
//   kernels left)
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernex/sandbox/policy.hpp"
#include "kernex/sandbox/process.hpp"
#include "kernex/sandbox/spawn.hpp"

using namespace kernex::sandbox;
using namespace std::chrono_literals;

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: kernel_stub spawn|process|spawn-unenforced WORKSPACE EXEC_DIR -- ARGV... | "
               "tmp|build EXEC_DIR\n");
  return 2;
}

int run_command(const std::string& mode, const std::string& workspace, const std::string& exec_dir,
                std::vector<std::string> argv) {
  auto policy = PolicyBuilder()
                    .workspace(workspace)
                    .executable(exec_dir)
                    .timeout(600s)
                    .enforce(mode != "spawn-unenforced")
                    .Build();
  if (!policy) {
    std::printf("policy: %s\n", policy.error().describe().c_str());
    return 1;
  }
  Command cmd;
  cmd.argv = std::move(argv);
  if (mode == "process") {
    auto proc = SandboxedProcess::start(*policy, cmd);
    if (!proc) {
      std::printf("start: %s\n", proc.error().describe().c_str());
      return 1;
    }
    std::printf("started\n");
    std::fflush(stdout);
    while (proc->read_line(SandboxedProcess::Clock::now() + 600s, 4096)) {  // until killed
    }
    return 0;
  }
  std::printf("started\n");
  std::fflush(stdout);
  auto r = spawn(*policy, cmd);
  if (!r) {
    std::printf("spawn: %s\n", r.error().describe().c_str());
    return 1;
  }
  std::printf("exit %d signal %d\n", r->exit_code, r->term_signal);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc < 3) return usage();
  const std::string mode = argv[1];
  if (mode == "tmp" || mode == "build") {
    auto policy = PolicyBuilder().executable(argv[2]).Build();
    if (!policy) {
      std::printf("policy: %s\n", policy.error().describe().c_str());
      return 1;
    }
    std::printf("%s\n", policy->private_tmp().c_str());
    if (mode == "tmp") {
      for (;;) ::pause();
    }
    auto r = spawn(*policy, Command{{"/bin/true"}, {}, {}, {}, {}, {}, {}});
    return r && r->success() ? 0 : 1;
  }
  if (argc < 6 || std::strcmp(argv[4], "--") != 0) return usage();
  return run_command(mode, argv[2], argv[3], std::vector<std::string>(argv + 5, argv + argc));
}
