// `kernex memory …`: reads (and backs up) the configured memory store without running a model.
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <memory>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "terminal_text.hpp"
#include "kernex/config.hpp"
#include "kernex/files.hpp"
#include "kernex/plugin_host.hpp"
#include "kernex/trajectory_segments.hpp"
#include "kernex/trajectory_view.hpp"

namespace kernex::cli {

// --limit's range: more rows than this is not a listing anyone reads.
constexpr std::uint64_t kMaxListLimit = 1'000'000;

// `kernex memory ACTION`.
struct MemoryArgs {
  std::string action;  // search | facts | history | export | import | usage | forget
  std::optional<std::string> data_dir;
  std::string tenant = "local";  // whose memory: `kernex serve` keeps each tenant's apart
  std::string query;
  std::optional<std::string> sender;
  std::optional<std::string> conversation;
  std::string file;
  std::size_t limit = 100;
  bool deleted = false;
  bool json = false;
};
namespace {

std::string dump(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

// The configured store: the one `kernex run` and `kernex serve` use (by default the sqlite store in
// <data_dir>/memory.db). `memory: none` leaves nothing to read.
Result<std::shared_ptr<MemoryStore>> open_store(const std::optional<std::string>& config_file,
                                                const MemoryArgs& args) {
  auto config =
      Config::load(config_file ? std::optional<std::filesystem::path>(*config_file) : std::nullopt);
  if (!config) return std::unexpected(config.error());
  if (args.data_dir)
    config->data_dir = std::filesystem::absolute(*args.data_dir).lexically_normal();
  if (!config->memory)
    return fail(ErrorCode::Config,
                "memory is off in this config (`memory: none`): no store to read");
  PluginRef ref = *config->memory;
  Json options = ref.config.is_object() ? ref.config : Json::object();
  if (!options.contains("data_dir")) options["data_dir"] = config->data_dir.string();
  std::vector<std::filesystem::path> dirs = config->plugin_dirs;
  for (auto& d : PluginHost::default_dirs()) dirs.push_back(std::move(d));
  static PluginHost host;  // outlives the store, which holds its library
  host = PluginHost::discover(dirs);
  auto store = host.create_memory(ref.name, options);
  if (!store) return fail(ErrorCode::Plugin, "memory plugin '" + ref.name + "'", store.error());
  return *store;
}

Json entry_json(const StoredMessage& m) {
  Json j = m.entry;
  j["seq"] = m.seq;
  j["conversation_id"] = m.conversation_id;
  j["created_at"] = m.created_at;
  return j;
}

int search(MemoryStore& store, const MemoryScope& scope, const MemoryArgs& args) {
  RecallQuery q;
  q.text = args.query;
  q.sender_id = args.sender.value_or("");
  q.limit = args.limit;
  auto hits = store.recall(scope, q);
  if (!hits) return report(hits.error());
  if (args.json) {
    Json out = Json::array();
    for (const auto& h : *hits) {
      out.push_back({{"source", h.source},
                     {"conversation_id", h.conversation_id},
                     {"seq", h.seq},
                     {"text", h.text},
                     {"created_at", h.created_at}});
    }
    std::cout << dump(out) << '\n';
    return kExitOk;
  }
  if (hits->empty()) std::cout << "no matches\n";
  for (const auto& h : *hits) {
    std::cout << "[" << h.created_at << "] " << h.conversation_id.substr(0, 8) << " " << h.source
              << ": " << for_terminal(h.text) << '\n';
  }
  return kExitOk;
}

int facts(MemoryStore& store, const MemoryScope& scope, const MemoryArgs& args) {
  auto facts = store.fact_records(scope, args.sender, args.deleted);
  if (!facts) return report(facts.error());
  if (args.json) {
    Json out = Json::array();
    for (const auto& f : *facts) {
      out.push_back({{"sender_id", f.sender_id},
                     {"key", f.key},
                     {"value", f.value},
                     {"updated_at", f.updated_at},
                     {"deleted_at", f.deleted_at ? Json(*f.deleted_at) : Json(nullptr)}});
    }
    std::cout << dump(out) << '\n';
    return kExitOk;
  }
  if (facts->empty()) std::cout << "no facts\n";
  for (const auto& f : *facts) {
    // Facts, messages and summaries are chat and model text: controls made visible.
    std::cout << for_terminal(f.sender_id + "  " + f.key + " = " + f.value)
              << (f.deleted_at ? "  (deleted)" : "") << '\n';
  }
  return kExitOk;
}

void print_message(const StoredMessage& m) {
  std::cout << "#" << m.seq << " [" << m.created_at << "] " << m.entry.role << ": ";
  if (m.entry.tool_result) {
    // A tool entry's content is its result.
    std::cout << for_terminal(m.entry.tool_result->name)
              << (m.entry.tool_result->is_error ? " failed => " : " => ")
              << for_terminal(m.entry.tool_result->content);
  } else {
    std::cout << for_terminal(m.entry.content);
  }
  for (const auto& c : m.entry.tool_calls) {
    std::cout << (m.entry.content.empty() ? "" : " ") << "-> "
              << for_terminal(c.name + dump(c.arguments));
  }
  std::cout << '\n';
}

// The newest `limit` messages of a conversation, oldest first.
Result<std::vector<StoredMessage>> tail(MemoryStore& store, const MemoryScope& scope,
                                        const std::string& id, std::size_t limit) {
  auto all = store.conversation_messages(scope, id, 0, SIZE_MAX);
  if (!all) return all;
  if (all->size() > limit)
    all->erase(all->begin(), all->end() - static_cast<std::ptrdiff_t>(limit));
  return all;
}

int history(MemoryStore& store, const MemoryScope& scope, const MemoryArgs& args) {
  if (args.conversation) {
    auto messages = tail(store, scope, *args.conversation, args.limit);
    if (!messages) return report(messages.error());
    if (args.json) {
      Json out = Json::array();
      for (const auto& m : *messages) out.push_back(entry_json(m));
      std::cout << dump(out) << '\n';
    } else {
      if (messages->empty())
        std::cout << "no messages in conversation " << *args.conversation << '\n';
      for (const auto& m : *messages) print_message(m);
    }
    return kExitOk;
  }
  ConversationFilter filter;
  filter.sender_id = args.sender;
  filter.limit = args.limit;
  auto conversations = store.list_conversations(scope, filter);
  if (!conversations) return report(conversations.error());
  if (args.json) {
    Json out = Json::array();
    for (const auto& c : *conversations) {
      auto messages = tail(store, scope, c.id, args.limit);
      if (!messages) return report(messages.error());
      Json list = Json::array();
      for (const auto& m : *messages) list.push_back(entry_json(m));
      out.push_back({{"id", c.id},
                     {"channel", c.key.channel},
                     {"sender_id", c.key.sender_id},
                     {"project", c.key.project},
                     {"status", c.status},
                     {"started_at", c.started_at},
                     {"last_activity", c.last_activity},
                     {"message_count", c.message_count},
                     {"summary", c.summary ? Json(*c.summary) : Json(nullptr)},
                     {"messages", list}});
    }
    std::cout << dump(out) << '\n';
    return kExitOk;
  }
  if (conversations->empty()) std::cout << "no conversations\n";
  for (const auto& c : *conversations) {
    std::cout << "conversation " << c.id << " (" << c.key.channel << "/" << c.key.sender_id
              << (c.key.project.empty() ? "" : "/" + c.key.project) << ", " << c.status << ", "
              << c.message_count << " messages, last active " << c.last_activity << " UTC)\n";
    if (c.summary) std::cout << "  summary: " << for_terminal(*c.summary) << '\n';
    auto messages = tail(store, scope, c.id, args.limit);
    if (!messages) return report(messages.error());
    for (const auto& m : *messages) {
      std::cout << "  ";
      print_message(m);
    }
  }
  return kExitOk;
}

int usage(MemoryStore& store, const MemoryScope& scope, const MemoryArgs& args) {
  auto rows = store.usage_by_day(scope);
  if (!rows) return report(rows.error());
  if (args.json) {
    Json out = Json::array();
    for (const auto& r : *rows) {
      out.push_back({{"day", r.day},
                     {"model", r.model},
                     {"provider", r.provider},
                     {"requests", r.requests},
                     {"input_tokens", r.usage.input_tokens},
                     {"output_tokens", r.usage.output_tokens},
                     {"cache_read_tokens", r.usage.cache_read_tokens},
                     {"cache_write_tokens", r.usage.cache_write_tokens},
                     {"total_tokens", r.usage.total_tokens()},
                     {"cost_usd", r.usage.cost_usd}});
    }
    std::cout << dump(out) << '\n';
    return kExitOk;
  }
  if (rows->empty()) std::cout << "no usage recorded\n";
  for (const auto& r : *rows) {
    std::ostringstream cost;
    cost << std::fixed << std::setprecision(6) << r.usage.cost_usd;
    std::cout << r.day << "  " << (r.model.empty() ? "-" : r.model) << "  " << r.provider << "  "
              << r.requests << " requests  in " << r.usage.input_tokens << "  out "
              << r.usage.output_tokens << "  cache read " << r.usage.cache_read_tokens
              << "  cache write " << r.usage.cache_write_tokens << "  $" << cost.str() << '\n';
  }
  return kExitOk;
}

// An export is data, not a manifest: far above the manifest cap, still bounded.
constexpr std::size_t kMaxImportBytes = std::size_t{256} << 20;

int import_file(MemoryStore& store, const MemoryScope& scope, const MemoryArgs& args) {
  Json doc;
  if (args.file == "-") {
    std::string text;
    char chunk[65536];
    while (text.size() <= kMaxImportBytes && std::cin.read(chunk, sizeof chunk).gcount() > 0)
      text.append(chunk, static_cast<std::size_t>(std::cin.gcount()));
    if (text.size() > kMaxImportBytes)
      return report(Error(ErrorCode::Limit, "memory export on stdin: larger than 256 MiB"));
    doc = parse_untrusted(text);
  } else {
    auto text = read_regular_file(args.file, "memory export", kMaxImportBytes);
    if (!text) return report(text.error());
    doc = parse_untrusted(*text);
  }
  if (doc.is_discarded())
    return report(Error(ErrorCode::Parse, args.file + ": not valid JSON (or nested deeper than " +
                                              std::to_string(kMaxJsonDepth) + ")"));
  if (auto r = store.import_json(scope, doc); !r) return report(r.error());
  return kExitOk;
}

// The trajectories of `scope` whose run_start names `conversation`: removed. How many. A serve
// tenant's are under `serve/<tenant>/`; local's are the rest (never another tenant's folder under
// `serve/`), so forgetting in one tenant never removes another's files.
Result<std::size_t> remove_trajectories(const std::filesystem::path& root, const MemoryScope& scope,
                                        const std::string& conversation) {
  namespace fs = std::filesystem;
  const bool local = scope.tenant() == MemoryScope::local().tenant();
  const fs::path dir = local ? root : root / "serve" / scope.tenant();
  std::size_t removed = 0;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return removed;
  fs::recursive_directory_iterator it(dir, ec), end;
  if (ec) return fail(ErrorCode::Io, "cannot list " + dir.string() + ": " + ec.message());
  std::vector<fs::path> matches;
  for (; it != end; it.increment(ec)) {
    if (ec) return fail(ErrorCode::Io, "cannot list " + dir.string() + ": " + ec.message());
    if (local && it.depth() == 1 && it->path().parent_path().filename() == "serve" &&
        it->path().filename() != scope.tenant()) {
      it.disable_recursion_pending();  // another serve tenant's folder
      continue;
    }
    if (it->is_directory(ec) && !it->is_symlink(ec) &&
        is_trajectory_day_dir(it->path().filename().string())) {
      // Day segments: the runs' lines are cut out of the shared files.
      auto cut = remove_day_runs(it->path(), [&](const Json& start) {
        auto c = start.find("conversation_id");
        return c != start.end() && *c == conversation;
      });
      if (!cut) return std::unexpected(cut.error());
      removed += *cut;
      continue;
    }
    if (!it->is_regular_file(ec) || it->path().extension() != ".jsonl") continue;
    std::ifstream in(it->path());
    std::string first;
    std::getline(in, first);  // run_start comes first
    const Json start = parse_untrusted(first);
    if (start.is_object() && start.value("type", "") == "run_start" &&
        start.value("conversation_id", "") == conversation)
      matches.push_back(it->path());
  }
  for (const auto& path : matches) {
    if (!fs::remove(path, ec) && ec)
      return fail(ErrorCode::Io, "cannot remove " + path.string() + ": " + ec.message());
    ++removed;
  }
  return removed;
}

// `kernex memory forget --conversation ID`: the conversation's messages, summaries, recall index
// entries, usage and audit rows (zeroed in the file: secure_delete, WAL truncated), and the
// trajectories of its runs.
int forget(const ConfigFile& config_file, MemoryStore& store, const MemoryScope& scope,
           const MemoryArgs& args) {
  const std::string& id = *args.conversation;
  auto deleted = store.delete_conversation(scope, id);
  if (!deleted && deleted.error().code != ErrorCode::Memory) return report(deleted.error());
  auto config =
      Config::load(config_file ? std::optional<std::filesystem::path>(*config_file) : std::nullopt);
  if (!config) return report(config.error());
  std::filesystem::path data_dir = config->data_dir;
  if (args.data_dir) data_dir = std::filesystem::absolute(*args.data_dir).lexically_normal();
  auto removed = remove_trajectories(data_dir / "trajectories", scope, id);
  if (!removed) return report(removed.error());
  if (!deleted && *removed == 0) return report(deleted.error());  // nothing of it anywhere
  if (args.json) {
    std::cout << dump(Json{{"conversation_id", id},
                           {"memory_deleted", deleted.has_value()},
                           {"trajectories_removed", *removed}})
              << '\n';
  } else {
    std::cout << "forgot conversation " << id << " (" << *removed << " trajectories removed)\n";
  }
  return kExitOk;
}

int memory_command(const ConfigFile& config, const MemoryArgs& args);

}  // namespace

CommandRun setup_memory(Command command, std::string&) {
  auto shared = std::make_shared<MemoryArgs>();
  MemoryArgs& args = *shared;
  Command memory = command;
  memory.require_subcommand();
  memory.fallthrough();  // --data-dir / --config may follow the action
  memory
      .add_option("--data-dir", args.data_dir,
                  "data directory (overrides data_dir and KERNEX_DATA_DIR)")
      .type_name("DIR");
  memory
      .add_option("--tenant", args.tenant,
                  "whose memory: a `kernex serve` tenant (default local, the CLI's and channels')")
      .type_name("NAME");
  const auto common = [&args](Command sub, const char* action) {
    sub.callback([&args, action] { args.action = action; });
    sub.add_flag("--json", args.json, "print JSON");
    return sub;
  };
  auto search = common(
      memory.add_subcommand("search", "Recall: past user messages and summaries matching QUERY"),
      "search");
  search.add_option("query", args.query, "words to look for (matched as a phrase)").required();
  search.add_option("--sender", args.sender, "only this sender's memory");
  search.add_option("--limit", args.limit, "at most N hits (default 100)")
      .check(uint_in(0, kMaxListLimit));
  auto facts = common(memory.add_subcommand("facts", "Facts known about senders"), "facts");
  facts.add_option("--sender", args.sender, "only this sender");
  facts.add_flag("--deleted", args.deleted, "include soft-deleted facts");
  auto history =
      common(memory.add_subcommand("history", "Conversations and their messages"), "history");
  history.add_option("--conversation", args.conversation, "one conversation's messages")
      .type_name("ID");
  history.add_option("--sender", args.sender, "only this sender's conversations");
  history
      .add_option("--limit", args.limit,
                  "the newest N conversations, each with its newest N messages (default 100)")
      .check(uint_in(0, kMaxListLimit));
  common(
      memory.add_subcommand("export", "Everything in the store as one JSON document (for backup)"),
      "export");
  auto import =
      common(memory.add_subcommand("import", "Load an export into an empty store"), "import");
  import.add_option("file", args.file, "the export (- for stdin)").required();
  common(memory.add_subcommand("usage", "Tokens and cost by day and model"), "usage");
  auto forget = common(memory.add_subcommand("forget",
                                             "Delete a conversation and every trace of it "
                                             "(messages, summaries, recall index, trajectories)"),
                       "forget");
  forget.add_option("--conversation", args.conversation, "the conversation to forget")
      .type_name("ID")
      .required();
  return [shared](const ConfigFile& config) { return memory_command(config, *shared); };
}

namespace {

int memory_command(const ConfigFile& config, const MemoryArgs& args) {
  auto scope = MemoryScope::of(args.tenant);
  if (!scope) return report(scope.error());
  auto store = open_store(config, args);
  if (!store) return report(store.error());
  if (args.action == "search") return search(**store, *scope, args);
  if (args.action == "facts") return facts(**store, *scope, args);
  if (args.action == "history") return history(**store, *scope, args);
  if (args.action == "usage") return usage(**store, *scope, args);
  if (args.action == "import") return import_file(**store, *scope, args);
  if (args.action == "forget") return forget(config, **store, *scope, args);
  if (args.action == "export") {
    auto doc = (*store)->export_json(*scope);
    if (!doc) return report(doc.error());
    std::cout << dump(*doc) << '\n';
    return kExitOk;
  }
  return report(Error(ErrorCode::Usage, "memory: unknown action '" + args.action + "'"));
}

}  // namespace

}  // namespace kernex::cli
