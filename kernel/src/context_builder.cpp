#include "context_builder.hpp"

#include <algorithm>
#include <optional>

#include "kernex/context_reads.hpp"
#include "kernex/log.hpp"
#include "kernex/utc_time.hpp"

namespace kernex {
namespace {

constexpr const char* kSummaryHeader = "[Earlier conversation summary]\n";

std::string join_prompt(const std::string& base, const std::string& extra) {
  if (base.empty()) return extra;
  if (extra.empty()) return base;
  return base + "\n\n" + extra;
}

// Returns the summary text standing in for the oldest `overflow` messages, reusing the stored
// one when it already covers them and summarising only what is new otherwise. nullopt means
// "drop": no summarizer, or it failed or said nothing (logged).
std::optional<std::string> summarize_overflow(const ContextInputs& in, const std::string& conv,
                                              std::uint64_t overflow, CompactionReport& report) {
  if (in.summarizer == nullptr) {
    log(LogLevel::Warn,
        "history overflow: compaction is 'summarize' but no summarizer is set; dropping " +
            std::to_string(overflow) + " oldest messages");
    return std::nullopt;
  }
  auto stored = in.store->compaction_summary(in.scope, conv);
  if (!stored) {
    log(LogLevel::Warn,
        "reading the stored summary failed (" + stored.error().describe() + "); recomputing it");
  }
  std::optional<StoredSummary> prior = stored ? *stored : std::nullopt;
  if (prior && prior->covered_messages == overflow && !prior->text.empty()) {
    report.summary_reused = true;
    return prior->text;
  }
  if (prior && prior->covered_messages > overflow) prior.reset();  // stale: history was rewritten

  auto oldest = in.store->oldest_messages(in.scope, conv, overflow);
  if (!oldest) {
    log(LogLevel::Warn, "history overflow: loading messages to summarise failed (" +
                            oldest.error().describe() + "); dropping them instead");
    return std::nullopt;
  }
  const std::size_t from = prior ? static_cast<std::size_t>(prior->covered_messages) : 0;
  std::vector<ContextEntry> fresh(
      oldest->begin() + static_cast<std::ptrdiff_t>(std::min(from, oldest->size())), oldest->end());
  std::string text = render_for_summary(fresh);
  if (prior) text = "Summary so far:\n" + prior->text + "\n\nLater messages:\n" + text;

  Result<std::string> summary = [&]() -> Result<std::string> {
    try {
      return in.summarizer->summarize(text);
    } catch (const std::exception& e) {
      return fail(ErrorCode::Provider, std::string("summarizer threw: ") + e.what());
    }
  }();
  if (!summary || summary->empty()) {
    log(LogLevel::Warn, "history overflow: summarising failed (" +
                            (summary ? std::string("empty summary") : summary.error().describe()) +
                            "); falling back to dropping " + std::to_string(overflow) +
                            " oldest messages");
    return std::nullopt;
  }
  if (auto saved =
          in.store->save_compaction_summary(in.scope, conv, StoredSummary{*summary, overflow});
      !saved) {
    log(LogLevel::Warn, "could not store the compaction summary: " + saved.error().describe());
  }
  return *summary;
}

// A part the store does not keep (Unsupported) is skipped quietly; a failing one is skipped
// with a warning: the turn goes on without it, as in kernex.
template <class T>
std::optional<T> optional_part(Result<T> r, const char* what) {
  if (r) return std::move(*r);
  if (r.error().code != ErrorCode::Unsupported) {
    log(LogLevel::Warn,
        std::string("context: loading ") + what + " failed: " + r.error().describe());
  }
  return std::nullopt;
}

// Profile, learned rules, earlier summaries, recall, tasks and outcomes, as ContextNeeds asks.
std::string memory_sections(const ContextInputs& in, const Request& request,
                            const std::string& conv, std::size_t history_size) {
  MemoryStore& store = *in.store;
  const std::string& sender = in.key.sender_id;
  const std::optional<std::string> project =
      in.key.project.empty() ? std::nullopt : std::optional<std::string>(in.key.project);
  std::string out;
  const auto add = [&out](const std::string& section) { out = join_prompt(out, section); };
  if (in.needs.profile) {
    if (auto facts = optional_part(store.facts(in.scope, sender), "facts"))
      add(profile_section(*facts));
  }
  if (in.needs.summaries) {
    if (auto s = optional_part(store.recent_summaries(in.scope, in.key, conv, 3), "summaries"))
      add(summaries_section(*s));
  }
  if (in.needs.recall) {
    RecallQuery q;
    q.text = request.text;
    q.sender_id = sender;
    q.limit = 5;
    q.current_conversation = conv;
    q.skip_newest = history_size;
    if (auto hits = optional_part(store.recall(in.scope, q), "recall")) add(recall_section(*hits));
  }
  if (in.needs.pending_tasks) {
    if (auto tasks = optional_part(store.pending_tasks(in.scope, sender), "tasks"))
      add(tasks_section(*tasks));
  }
  if (in.needs.profile) {
    if (auto lessons = optional_part(store.lessons(in.scope, sender, project), "lessons"))
      add(lessons_section(*lessons));
  }
  if (in.needs.outcomes) {
    if (auto o = optional_part(store.recent_outcomes(in.scope, sender, 15, project), "outcomes")) {
      add(outcomes_section(*o, utc_now()));
    }
  }
  return out;
}

// The store's reads of one build in one snapshot, where the store offers it (ContextReadScope),
// ended before anything that may write or wait: a summary is made and saved after them.
class ContextReads {
 public:
  explicit ContextReads(MemoryStore& store) : scope_(dynamic_cast<ContextReadScope*>(&store)) {
    if (scope_ != nullptr) scope_->begin_context_reads();
  }
  ~ContextReads() { end(); }
  ContextReads(const ContextReads&) = delete;
  ContextReads& operator=(const ContextReads&) = delete;
  void end() {
    if (scope_ != nullptr) scope_->end_context_reads();
    scope_ = nullptr;
  }

 private:
  ContextReadScope* scope_;
};

}  // namespace

std::size_t first_whole_exchange(const std::vector<ContextEntry>& window) {
  std::size_t i = 0;
  while (i < window.size() && window[i].role == "tool") ++i;
  return i;
}

std::string render_for_summary(const std::vector<ContextEntry>& entries) {
  std::string out;
  for (const auto& e : entries) {
    if (!out.empty()) out += '\n';
    out += e.role + ": " + e.content;
    for (const auto& call : e.tool_calls)
      out += " [called " + call.name + " " + call.arguments.dump() + "]";
  }
  return out;
}

Result<BuiltContext> build_context(const ContextInputs& in, const Request& request) {
  BuiltContext built;
  built.context = Context(request.text);
  built.context.system_prompt = in.system_prompt;
  KERNEX_ASSIGN_OR_RETURN(auto added, add_memory(in, request, built.context));
  built.conversation_id = std::move(added.conversation_id);
  built.compaction = added.compaction;
  return built;
}

Result<MemoryAdded> add_memory(const ContextInputs& in, const Request& request, Context& context) {
  MemoryAdded built;
  if (in.store == nullptr) return built;
  std::string prompt = context.system_prompt;
  const Limits& limits = *in.limits;
  ContextReads reads(*in.store);
  auto conv = in.store->open_conversation(in.scope, in.key, limits.conversation_idle);
  if (!conv) return fail(ErrorCode::Memory, "opening the conversation failed", conv.error());
  built.conversation_id = *conv;
  if (in.history_given) {
    // The caller's history is the conversation: recall leaves this one out entirely, so a
    // regenerated or edited turn never meets its earlier versions in the prompt.
    constexpr std::size_t kWholeConversation = 1'000'000'000;
    context.system_prompt =
        join_prompt(prompt, memory_sections(in, request, *conv, kWholeConversation));
    return built;
  }

  auto window = in.store->recent_messages(in.scope, *conv, limits.max_context_messages);
  if (!window) return fail(ErrorCode::Memory, "loading history failed", window.error());
  std::uint64_t total = window->size();
  if (window->size() >= limits.max_context_messages) {
    auto count = in.store->message_count(in.scope, *conv);
    if (!count) return fail(ErrorCode::Memory, "counting history failed", count.error());
    total = std::max<std::uint64_t>(*count, window->size());
  }
  const std::size_t skip = first_whole_exchange(*window);
  context.history.assign(window->begin() + static_cast<std::ptrdiff_t>(skip), window->end());
  const std::uint64_t overflow = total - context.history.size();
  built.compaction.overflow = overflow;

  prompt = join_prompt(prompt, memory_sections(in, request, *conv, context.history.size()));
  reads.end();
  if (overflow > 0) {
    std::optional<std::string> summary;
    if (limits.compaction == CompactionStrategy::Summarize) {
      summary = summarize_overflow(in, *conv, overflow, built.compaction);
    } else {
      log(LogLevel::Warn,
          "history overflow: dropping " + std::to_string(overflow) +
              " oldest messages (set limits.compaction: summarize to keep their gist)");
    }
    if (summary) {
      built.compaction.summarized = true;
      // After the stable prompt, so prompt-cache prefixes survive (kernex put it first).
      prompt = join_prompt(prompt, kSummaryHeader + *summary);
    }
  }
  context.system_prompt = std::move(prompt);
  return built;
}

}  // namespace kernex
