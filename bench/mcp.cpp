// tools/call round trips per second to server-everything's `echo`, through the kernel's MCP client
// (server inside the sandbox, as skills run it) beside the official TypeScript SDK client
// (bench/mcp_sdk_client.mjs, server started by the SDK's stdio transport) in the same run. Rounds
// alternate between the two so both see the same machine; each round starts a fresh server, warms
// it up, then times sequential calls (one request in flight, as an agent turn makes them).
// Usage: mcp [CALLS] [ROUNDS]   (default 2000, 5). Needs the npm packages of tests/interop in
// <build>/npm (the bench_mcp_npm target installs them).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kernex/mcp/client.hpp"

#include "bench_util.hpp"

namespace {

using kernex::bench::median;

namespace fs = std::filesystem;
using namespace kernex;
using Clock = std::chrono::steady_clock;

const fs::path kNpm = KERNEX_BENCH_NPM_DIR;
const fs::path kModules = kNpm / "node_modules";
const fs::path kServer = kModules / "@modelcontextprotocol/server-everything/dist/index.js";
// ESM resolves packages from the script's own folder, so main() copies the script into the npm
// prefix.
const fs::path kSdkScript = kNpm / "kernex_bench_sdk_client.mjs";
constexpr int kWarmup =
    500;  // node JIT-compiles the server's hot path over the first few hundred calls

McpServer everything() {
  McpServer s;
  s.name = "everything";
  s.command = KERNEX_BENCH_NODE;
  s.args = {kServer.string(), "stdio"};
  return s;
}

// Calls per second through the kernel's client, or a negative number after printing why.
double kernel_round(int calls, const fs::path& workspace) {
  mcp::ServerSandbox sandbox;
  sandbox.workspace = workspace;
  sandbox.read_only = {kModules};
  mcp::McpClient client(everything(), sandbox);
  auto call = [&](int i) {
    const std::string message = "hello " + std::to_string(i);
    auto r = client.call_tool("echo", Json{{"message", message}});
    if (!r) {
      std::fprintf(stderr, "kernel client: %s\n", r.error().describe().c_str());
      return false;
    }
    if (r->rendered.is_error || r->rendered.text.find(message) == std::string::npos) {
      std::fprintf(stderr, "kernel client: bad echo answer: %s\n", r->rendered.text.c_str());
      return false;
    }
    return true;
  };
  for (int i = 0; i < kWarmup; ++i) {
    if (!call(i)) return -1;
  }
  const auto start = Clock::now();
  for (int i = 0; i < calls; ++i) {
    if (!call(i)) return -1;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  client.shutdown();
  return calls / seconds;
}

// Calls per second through the SDK client, or a negative number after printing why.
double sdk_round(int calls) {
  const std::string cmd = std::string(KERNEX_BENCH_NODE) + " " + kSdkScript.string() + " " +
                          std::to_string(calls) + " " + std::to_string(kWarmup) + " " +
                          KERNEX_BENCH_NODE + " " + kServer.string() + " stdio";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return -1;
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  if (::pclose(pipe) != 0) {
    std::fprintf(stderr, "sdk client failed: %s\n", out.c_str());
    return -1;
  }
  try {
    const Json seen = Json::parse(out);
    return seen.at("calls").get<double>() / seen.at("seconds").get<double>();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sdk client printed %s (%s)\n", out.c_str(), e.what());
    return -1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 2000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  if (calls <= 0 || rounds <= 0) {
    std::fprintf(stderr, "usage: mcp [CALLS>0] [ROUNDS>0]\n");
    return 2;
  }
  if (!fs::exists(kServer)) {
    std::fprintf(stderr, "%s is missing: build the bench_mcp_npm target first\n", kServer.c_str());
    return 2;
  }
  fs::copy_file(KERNEX_BENCH_SOURCE_DIR "/mcp_sdk_client.mjs", kSdkScript,
                fs::copy_options::overwrite_existing);
  char tmpl[] = "/tmp/kernex-bench-mcp-XXXXXX";
  if (!::mkdtemp(tmpl)) return 2;
  const fs::path workspace = tmpl;

  std::vector<double> kernel, sdk;
  for (int r = 0; r < rounds; ++r) {
    const double k = kernel_round(calls, workspace);
    const double s = sdk_round(calls);
    if (k < 0 || s < 0) return 1;
    kernel.push_back(k);
    sdk.push_back(s);
    std::printf("round %d: kernel client %8.0f calls/s   sdk client %8.0f calls/s   ratio %.2f\n",
                r + 1, k, s, k / s);
  }
  fs::remove_all(workspace);
  const double k = median(kernel), s = median(sdk);
  std::printf("\nmedian of %d rounds x %d calls (echo, one request in flight)\n", rounds, calls);
  std::printf("  kernel client (server sandboxed) %8.0f calls/s  %7.1f us/call\n", k, 1e6 / k);
  std::printf("  official SDK client              %8.0f calls/s  %7.1f us/call\n", s, 1e6 / s);
  std::printf("  ratio kernel/sdk %.2f  (target >= 1.5)\n", k / s);
  return 0;
}
