// LD_PRELOADed into a process (bench/serve's `kernex serve` with --sql-cpu), counts the CPU time
// its threads spend inside SQLite statements: from a statement's start to its end (the
// SQLITE_TRACE_STMT and SQLITE_TRACE_PROFILE callbacks of sqlite3_trace_v2, installed on every
// connection through sqlite3_auto_extension), in the thread's own CPU clock, less what reading
// that clock costs. The totals live in the file named by KERNEX_BENCH_SQL_CPU (two uint64: ns,
// statements), mapped shared, so the bench reads them at any moment. A statement that returns
// rows counts until its reset: the caller's reading of its rows counts too (an upper bound).
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <unordered_map>
#include <vector>

namespace {

std::uint64_t* counters = nullptr;  // [0] CPU ns inside statements, [1] statements
std::uint64_t clock_cost_ns = 0;    // one reading of the thread CPU clock, measured at load

std::uint64_t thread_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// The median gap between two readings back to back: what the two readings around a statement add.
std::uint64_t measure_clock_cost() {
  std::vector<std::uint64_t> gaps(201);
  for (auto& g : gaps) {
    const std::uint64_t a = thread_cpu_ns();
    g = thread_cpu_ns() - a;
  }
  std::nth_element(gaps.begin(), gaps.begin() + 100, gaps.end());
  return gaps[100];
}

int on_trace(unsigned type, void*, void* p, void* x) {
  thread_local std::unordered_map<void*, std::uint64_t> started;
  auto* stmt = static_cast<sqlite3_stmt*>(p);
  if (type == SQLITE_TRACE_STMT) {
    if (x != sqlite3_sql(stmt)) return 0;  // a trigger's: inside its statement
    std::uint64_t& slot = started[p];
    slot = thread_cpu_ns();  // read last: the map's work is not the statement's
    return 0;
  }
  const std::uint64_t now = thread_cpu_ns();  // read first
  const auto it = started.find(p);
  if (it == started.end()) return 0;
  const std::uint64_t spent = now - it->second;
  started.erase(it);
  __atomic_add_fetch(&counters[0], spent > clock_cost_ns ? spent - clock_cost_ns : 0,
                     __ATOMIC_RELAXED);
  __atomic_add_fetch(&counters[1], 1, __ATOMIC_RELAXED);
  return 0;
}

int trace_connection(sqlite3* db, char**, const sqlite3_api_routines*) {
  sqlite3_trace_v2(db, SQLITE_TRACE_STMT | SQLITE_TRACE_PROFILE, on_trace, nullptr);
  return SQLITE_OK;
}

__attribute__((constructor)) void install() {
  const char* path = std::getenv("KERNEX_BENCH_SQL_CPU");
  if (path == nullptr) return;
  const int fd = ::open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0 || ::ftruncate(fd, 2 * sizeof(std::uint64_t)) != 0) std::abort();
  void* mapped =
      ::mmap(nullptr, 2 * sizeof(std::uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (mapped == MAP_FAILED) std::abort();
  counters = static_cast<std::uint64_t*>(mapped);
  clock_cost_ns = measure_clock_cost();
  sqlite3_auto_extension(reinterpret_cast<void (*)()>(trace_connection));
}

}  // namespace
