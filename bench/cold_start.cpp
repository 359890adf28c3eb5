// Cold start: what the kernel adds on top of the dynamic loader when it boots.
//   kernel_boot      PluginHost::discover over the plugin dir, Config::load of a small yaml, and
//                    one object created from every plugin with an empty config; all released.
//   dlopen_baseline  dlopen of the same .so files, then dlclose of each.
// Each repetition is one boot, so the reported medians are medians of single boots.
// Environment: KERNEX_BENCH_PLUGIN_DIR overrides the plugin dir, KERNEX_BENCH_REPETITIONS the
// count.
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernex/plugin_host.hpp"
#include "kernex/config.hpp"

namespace {

namespace fs = std::filesystem;

fs::path plugin_dir() {
  if (const char* dir = std::getenv("KERNEX_BENCH_PLUGIN_DIR")) return dir;
  return KERNEX_BENCH_PLUGIN_DIR;
}

int repetitions() {
  if (const char* n = std::getenv("KERNEX_BENCH_REPETITIONS")) return std::max(1, std::atoi(n));
  return 41;
}

// The same selection discover() makes: regular *.so files.
std::vector<fs::path> so_files(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".so" && it->is_regular_file(ec)) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Returns false when the config can't be read: a boot without its config is not worth timing.
bool load_config(benchmark::State& state) {
  auto config = kernex::Config::load(fs::path(KERNEX_BENCH_CONFIG));
  if (!config) {
    state.SkipWithError(("Config::load failed: " + config.error().describe()).c_str());
    return false;
  }
  benchmark::DoNotOptimize(config->system_prompt.data());
  return true;
}

struct BootCounts {
  std::size_t files = 0, ok = 0, created = 0;
};
BootCounts last_boot;

std::shared_ptr<void> create(const kernex::PluginHost& host, const kernex::PluginInfo& info) {
  const kernex::Json empty = kernex::Json::object();
  switch (*info.kind) {
    case kernex::PluginKind::Provider:
      if (auto p = host.create_provider(info.name, empty)) return *p;
      break;
    case kernex::PluginKind::Memory:
      if (auto m = host.create_memory(info.name, empty)) return *m;
      break;
    case kernex::PluginKind::Hook:
      if (auto h = host.create_hook(info.name, empty)) return *h;
      break;
    case kernex::PluginKind::Toolbox:
      if (auto t = host.create_toolbox(info.name, empty)) return *t;
      break;
    case kernex::PluginKind::Channel:
      if (auto c = host.create_channel(info.name, empty)) return *c;
      break;
  }
  return nullptr;  // plugins that need real config (API keys, paths) may refuse an empty one
}

void kernel_boot(benchmark::State& state) {
  const fs::path dir = plugin_dir();
  for (auto _ : state) {
    if (!load_config(state)) break;
    kernex::PluginHost host = kernex::PluginHost::discover({dir});
    std::vector<std::shared_ptr<void>> objects;
    BootCounts counts;
    for (const kernex::PluginInfo& info : host.plugins()) {
      ++counts.files;
      if (!info.ok()) continue;
      ++counts.ok;
      if (auto object = create(host, info)) objects.push_back(std::move(object));
    }
    counts.created = objects.size();
    last_boot = counts;
    benchmark::DoNotOptimize(objects.data());
  }
}

void dlopen_baseline(benchmark::State& state) {
  const std::vector<fs::path> files = so_files(plugin_dir());
  std::vector<void*> handles;
  handles.reserve(files.size());
  for (auto _ : state) {
    for (const fs::path& file : files)
      handles.push_back(dlopen(file.c_str(), RTLD_LAZY | RTLD_LOCAL));
    for (void* handle : handles) {
      if (handle != nullptr) dlclose(handle);
    }
    handles.clear();
  }
}

// Keeps the console output and remembers each benchmark's median.
class MedianReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name == "median" &&
          !run.error_occurred) {
        medians_[run.run_name.function_name] = run.GetAdjustedRealTime();
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
  const std::map<std::string, double>& medians() const { return medians_; }

 private:
  std::map<std::string, double> medians_;
};

// glibc keeps a library mapped after dlclose when it defines STB_GNU_UNIQUE symbols; then
// every boot after the first is warm, which the summary should say.
std::size_t still_mapped(const std::vector<fs::path>& files) {
  std::size_t mapped = 0;
  for (const fs::path& file : files) {
    if (void* handle = dlopen(file.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
      ++mapped;
      dlclose(handle);
    }
  }
  return mapped;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = repetitions();
  for (auto* bench : {benchmark::RegisterBenchmark("kernel_boot", kernel_boot),
                      benchmark::RegisterBenchmark("dlopen_baseline", dlopen_baseline)}) {
    bench->Iterations(1)->Repetitions(reps)->ReportAggregatesOnly()->UseRealTime()->Unit(
        benchmark::kMicrosecond);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  const fs::path dir = plugin_dir();
  const std::vector<fs::path> files = so_files(dir);
  std::printf("plugin_dir=%s so_files=%zu\n", dir.c_str(), files.size());
  if (files.empty())
    std::printf("warning: no .so files in %s; both benchmarks time an empty boot\n", dir.c_str());

  MedianReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  std::printf("plugins files=%zu ok=%zu created=%zu still_mapped_after_boot=%zu\n", last_boot.files,
              last_boot.ok, last_boot.created, still_mapped(files));
  const auto& m = reporter.medians();
  if (!m.contains("kernel_boot") || !m.contains("dlopen_baseline")) {
    std::fprintf(stderr,
                 "cold_start: a benchmark did not report a median (filtered out or failed)\n");
    return 1;
  }
  const double boot = m.at("kernel_boot"), base = m.at("dlopen_baseline");
  std::printf("kernel_boot median_us=%.1f dlopen_baseline median_us=%.1f ratio=%.2f\n", boot, base,
              base > 0 ? boot / base : 0.0);
  return 0;
}
