// topology: what running agents as a topology costs beside calling the kernel by hand.
// 1. Overhead: a 10-phase sequential topology (each phase handed the previous one's output) on the
//    replay provider, beside the same 10 Kernel::run calls made by hand in this process (the same
//    prompts, empty history, trajectories on in both). Target: <= 1.1x. The topology's extra work
//    is its journal: one atomic, fsynced rewrite per finished phase, and each call's turn journal.
// 2. Parallel group: 8 agents in one parallel group against a fake OpenAI-compatible model that
//    answers after 200 ms, beside one agent alone. Target: <= 1.2x one agent's wall time.
// Usage: topology [REPS] (default 20).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "bench_util.hpp"
#include "fake_llm.hpp"
#include "kernex/kernel.hpp"
#include "kernex/topology/runner.hpp"
#include "kernex/topology/topology.hpp"

namespace fs = std::filesystem;
using kernex::Json;
using kernex::bench::Clock;
using kernex::bench::die;
using kernex::bench::median;
namespace topo = kernex::topology;

namespace {

constexpr const char* kBench = "topology";

fs::path scratch() {
  std::string pattern = (fs::temp_directory_path() / "kx-bench-topology-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) die(kBench, "mkdtemp failed");
  return pattern;
}

// A topology folder: `phases` phases of agent a, in one parallel group or in a chain.
fs::path write_topology(const fs::path& root, const std::string& name, int phases, bool parallel) {
  const fs::path dir = root / name;
  fs::create_directories(dir / "agents");
  std::ofstream(dir / "agents/a.md") << "You answer briefly.\n";
  std::ofstream toml(dir / "TOPOLOGY.toml");
  toml << "[topology]\nname = \"" << name << "\"\ndescription = \"bench\"\nversion = 1\n";
  for (int i = 0; i < phases; ++i) {
    toml << "\n[[phases]]\nname = \"p" << i << "\"\nagent = \"a\"\n";
    if (parallel)
      toml << "parallel_group = \"g\"\ninputs = [\"input\"]\n";
    else
      toml << "inputs = [\"" << (i == 0 ? std::string("input") : "p" + std::to_string(i - 1))
           << "\"]\n";
  }
  return dir;
}

std::unique_ptr<kernex::Kernel> make_kernel(const fs::path& data, const std::string& provider,
                                            const Json& options) {
  kernex::Config config;
  config.plugin_dirs = {KERNEX_BENCH_PLUGIN_DIR};
  config.provider = {provider, options};
  config.toolboxes = std::vector<kernex::PluginRef>{};
  config.data_dir = data;
  auto made = kernex::Kernel::create(std::move(config));
  if (!made) die(kBench, made.error().describe());
  return std::move(*made);
}

void overhead(int reps, const fs::path& root, bool durable) {
  const auto dir = write_topology(root, "chain", 10, false);
  auto t = topo::load_dir(dir);
  if (!t) die(kBench, t.error().describe());
  {
    std::ofstream script(root / "script.jsonl");
    for (int i = 0; i < reps * 20 + 20; ++i)
      script
          << R"({"text": "an answer of a few words", "usage": {"input_tokens": 50, "output_tokens": 8}})"
          << '\n';
  }
  auto kernel =
      make_kernel(root / "data", "replay", {{"script", (root / "script.jsonl").string()}});
  const std::string prompt = t->agents.at("a").prompt;
  std::vector<double> hand, topology;
  for (int rep = 0; rep < reps; ++rep) {
    auto start = Clock::now();
    std::string previous = "the input";
    for (int i = 0; i < 10; ++i) {
      kernex::RunOptions o;
      o.history = std::vector<kernex::ContextEntry>{};
      o.extra_system_prompt = prompt;
      auto r = kernel->run(kernex::Request::from_text(
                               "bench", "phase p" + std::to_string(i) + "\n## Input\n" + previous),
                           o);
      if (!r) die(kBench, r.error().describe());
      previous = r->text;
    }
    hand.push_back(kernex::bench::us_since(start) / 1000);
    start = Clock::now();
    topo::RunnerOptions options;
    options.input = "the input";
    options.durable = durable;
    auto r = topo::run(*kernel, *t, options);
    if (!r || r->outcome != "end_turn") die(kBench, r ? r->outcome : r.error().describe());
    topology.push_back(kernex::bench::us_since(start) / 1000);
  }
  const double h = median(hand), tp = median(topology);
  std::printf(
      "overhead (%s): 10 phases, %d reps: by hand %.2f ms, topology %.2f ms, ratio %.2fx "
      "(target <= 1.1x)\n",
      durable ? "journal fsynced" : "journal not fsynced", reps, h, tp, tp / h);
}

void parallel(int reps, const fs::path& root, bool durable) {
  kernex::bench::FakeLlmOptions llm_options;
  llm_options.whole_delay = std::chrono::milliseconds(200);
  llm_options.threads = 2;
  kernex::bench::FakeLlm llm(llm_options);
  ::setenv("KERNEX_BENCH_KEY", "sk-bench", 1);
  auto kernel = make_kernel(root / "data-par", "openai",
                            {{"base_url", llm.base_url()},
                             {"api_key_env", "KERNEX_BENCH_KEY"},
                             {"model", "gpt-4o-mini"}});
  auto one = topo::load_dir(write_topology(root, "one", 1, false));
  auto eight = topo::load_dir(write_topology(root, "eight", 8, true));
  if (!one || !eight) die(kBench, "cannot load the bench topologies");
  std::vector<double> single, group;
  for (int rep = 0; rep < std::max(3, reps / 4); ++rep) {
    for (auto [t, out] : {std::pair{&*one, &single}, std::pair{&*eight, &group}}) {
      topo::RunnerOptions options;
      options.input = "go";
      options.durable = durable;
      const auto start = Clock::now();
      auto r = topo::run(*kernel, *t, options);
      if (!r || r->outcome != "end_turn") die(kBench, r ? r->outcome : r.error().describe());
      out->push_back(kernex::bench::us_since(start) / 1000);
    }
  }
  const double s = median(single), g = median(group);
  std::printf(
      "parallel (%s): 200 ms model, one agent %.1f ms, a group of 8 %.1f ms, ratio %.2fx "
      "(target <= 1.2x)\n",
      durable ? "journal fsynced" : "journal not fsynced", s, g, g / s);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  const fs::path root = scratch();
  for (bool durable : {true, false}) {
    overhead(reps, root / (durable ? "d" : "n"), durable);
    parallel(reps, root / (durable ? "d" : "n"), durable);
  }
  std::error_code ec;
  fs::remove_all(root, ec);
  return 0;
}
