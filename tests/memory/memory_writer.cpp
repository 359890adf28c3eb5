// Helper for the durability tests: a separate process that writes to a SQLite memory store
// and reports progress on stdout, so a test can SIGKILL it mid-stream or race two of them.
//   memory_writer write DB N        saves N exchanges, printing "ack I" after each one commits
//   memory_writer audit DB N        records N tool calls in the audit log, printing "ack I" after
//                                   each record_tool_call returns
//   memory_writer claim DB WORKER   claims due tasks one at a time, records a run and completes
//                                   each ("ran ID"), until none is due
//   memory_writer check DB          prints PRAGMA integrity_check's answer
#include <sqlite3.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "kernex/plugin_host.hpp"

namespace {

std::shared_ptr<kernex::MemoryStore> open_store(kernex::PluginHost& host, const std::string& path) {
  auto store = host.create_memory("sqlite", kernex::Json{{"path", path}});
  if (!store) {
    std::cerr << "memory_writer: " << store.error().describe() << '\n';
    std::exit(2);
  }
  return *store;
}

int write(kernex::MemoryStore& store, long n) {
  auto conv = store.open_conversation(kernex::MemoryScope::local(), {"test", "writer", ""},
                                      std::chrono::minutes(120));
  if (!conv) {
    std::cerr << conv.error().describe() << '\n';
    return 2;
  }
  for (long i = 0; i < n; ++i) {
    const std::string k = std::to_string(i);
    auto saved = store.append_messages(kernex::MemoryScope::local(), *conv,
                                       {kernex::ContextEntry::user("question " + k),
                                        kernex::ContextEntry::assistant("answer " + k)});
    if (!saved) {
      std::cerr << saved.error().describe() << '\n';
      return 3;
    }
    std::printf("ack %ld\n", i);
    std::fflush(stdout);
  }
  return 0;
}

int audit(kernex::MemoryStore& store, long n) {
  for (long i = 0; i < n; ++i) {
    kernex::AuditRecord rec;
    rec.conversation_id = "audited";
    rec.tool = "tool " + std::to_string(i);
    rec.status = "ok";
    if (auto r = store.record_tool_call(kernex::MemoryScope::local(), rec); !r) {
      std::cerr << r.error().describe() << '\n';
      return 3;
    }
    std::printf("ack %ld\n", i);
    std::fflush(stdout);
  }
  return 0;
}

int claim(kernex::MemoryStore& store, const std::string& worker) {
  for (;;) {
    auto tasks =
        store.claim_due_tasks(kernex::MemoryScope::local(), worker, std::chrono::seconds(600), 1);
    if (!tasks) {
      std::cerr << tasks.error().describe() << '\n';
      return 3;
    }
    if (tasks->empty()) return 0;
    for (const auto& t : *tasks) {
      kernex::TaskRun run;
      run.task_id = t.id;
      run.started_at = "2026-01-01 00:00:00";
      run.status = "completed";
      run.result = worker;
      if (auto r = store.record_task_run(kernex::MemoryScope::local(), run); !r) {
        std::cerr << r.error().describe() << '\n';
        return 3;
      }
      auto done = store.complete_task(kernex::MemoryScope::local(), t.id, worker);
      if (!done || !*done) {
        std::cerr << "complete failed for " << t.id << '\n';
        return 3;
      }
      std::printf("ran %s\n", t.id.c_str());
      std::fflush(stdout);
    }
  }
}

int check(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    std::printf("open failed: %s\n", sqlite3_errmsg(db));
    sqlite3_close(db);
    return 2;
  }
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &stmt, nullptr);
  while (stmt != nullptr && sqlite3_step(stmt) == SQLITE_ROW) {
    std::printf("%s\n", reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)));
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && !(argc == 3 && std::string(argv[1]) == "check")) {
    std::cerr << "usage: memory_writer write DB N | audit DB N | claim DB WORKER | check DB\n";
    return 1;
  }
  const std::string mode = argv[1], db = argv[2];
  if (mode == "check") return check(db);
  kernex::PluginHost host = kernex::PluginHost::discover({KERNEX_PLUGIN_BUILD_DIR});
  auto store = open_store(host, db);
  if (mode == "write") return write(*store, std::stol(argv[3]));
  if (mode == "audit") return audit(*store, std::stol(argv[3]));
  if (mode == "claim") return claim(*store, argv[3]);
  return 1;
}
