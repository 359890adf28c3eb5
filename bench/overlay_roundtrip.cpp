// overlay_roundtrip: one sandboxed tool round trip through ToolboxRunner (the path the script
// toolboxes take; the files tools and MCP servers build their policies the same way) with the
// host's workspace seen through an overlay (RunOptions::workspace_layers), beside the same round
// trip over the plain workspace, interleaved in one run. Two tools:
//   echo   the call's JSON through /bin/cat (the spawn cost alone)
//   write  `sh -c` appending a line to a file of the workspace and reading it back (a copy-up into
//          the upper layer the first time, then writes in the overlay)
// The overlay's mount is made once per layers (the policy's base namespace), not per spawn.
// Target: overlay ≤ 1.1 × plain. Usage: overlay_roundtrip [ITERATIONS] (default 300).
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "kernex/sandbox/toolbox.hpp"

namespace {

namespace fs = std::filesystem;
namespace sb = kernex::sandbox;
using namespace kernex::bench;

struct Tool {
  const char* label;
  kernex::Toolbox toolbox;
  kernex::Json args;
};

double round_trip(sb::ToolboxRunner& runner, const Tool& tool, const sb::CallScope& scope) {
  const auto start = Clock::now();
  auto r = runner.run(tool.toolbox, kernex::ToolCall{"b", tool.toolbox.name, tool.args}, scope);
  const double us = us_since(start);
  if (r.is_error) die("overlay_roundtrip", std::string(tool.label) + ": " + r.content);
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::max(1, std::atoi(argv[1])) : 300;
  std::string tmpl = (fs::temp_directory_path() / "kernex-bench-overlay-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) die("overlay_roundtrip", "mkdtemp failed");
  const fs::path root = fs::canonical(tmpl), ws = root / "ws", layers = root / "layers";
  fs::create_directories(ws);
  for (const fs::path& d : {layers, layers / "upper", layers / "work"}) ::mkdir(d.c_str(), 0700);
  std::ofstream(ws / "log.txt") << "start\n";

  sb::ToolboxRunOptions options;
  options.workspace = ws;
  sb::ToolboxRunner runner(options);
  std::vector<Tool> tools(2);
  tools[0].label = "echo (cat of the call's JSON)";
  tools[0].toolbox.name = "echo_json";
  tools[0].toolbox.command = "cat";
  tools[0].args = kernex::Json{{"path", "report.pdf"}, {"pages", {1, 2, 3}}};
  tools[1].label = "write (append a line, read it back)";
  tools[1].toolbox.name = "append";
  tools[1].toolbox.command = "sh";
  tools[1].toolbox.args = {"-c", "echo line >> log.txt && tail -n 1 log.txt"};
  tools[1].args = kernex::Json::object();

  const sb::CallScope plain{{}, ws, std::nullopt}, overlay{{}, ws, layers};
  // First calls build the policies (and the overlay's namespace): not timed.
  for (const Tool& t : tools) {
    round_trip(runner, t, plain);
    round_trip(runner, t, overlay);
  }
  std::printf("sandboxed tool round trip, %d iterations each, plain and overlay interleaved\n",
              iterations);
  for (const Tool& t : tools) {
    std::vector<double> p, o;
    for (int i = 0; i < iterations; ++i) {
      p.push_back(round_trip(runner, t, plain));
      o.push_back(round_trip(runner, t, overlay));
    }
    std::printf("%-38s plain %7.0f us   overlay %7.0f us   overlay/plain %.3f\n", t.label,
                median(p), median(o), median(o) / median(p));
  }
  std::error_code ec;
  fs::permissions(layers / "work" / "work", fs::perms::owner_all, ec);
  fs::remove_all(root, ec);
  return 0;
}
