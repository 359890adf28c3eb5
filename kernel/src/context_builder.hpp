// Assembles a run's Context from memory, the base prompt and active skills, compacting history
// that no longer fits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernex/config.hpp"
#include "kernex/context.hpp"
#include "kernex/error.hpp"
#include "kernex/memory.hpp"
#include "kernex/message.hpp"
#include "kernex/provider.hpp"

namespace kernex {

// Index of the first of `window` to keep: leading tool results whose call fell outside the
// window are dropped with it, so a tool call is never separated from its result.
std::size_t first_whole_exchange(const std::vector<ContextEntry>& window);

struct CompactionReport {
  std::uint64_t overflow = 0;   // stored messages left out of history
  bool summarized = false;      // a summary stands in for them
  bool summary_reused = false;  // ... taken from the store, no summarizer call
};

struct BuiltContext {
  Context context;
  std::string conversation_id;
  CompactionReport compaction;
};

struct ContextInputs {
  MemoryStore* store = nullptr;              // none: no history
  MemoryScope scope = MemoryScope::local();  // the tenant every store call is in
  ConversationKey key;
  std::string system_prompt;  // build_context only: base prompt plus skills, already joined
  const Limits* limits = nullptr;
  Summarizer* summarizer = nullptr;  // used when limits->compaction is Summarize
  ContextNeeds needs;                // what else to load; a store without a part is skipped
  // The caller gives the history (RunOptions::memory_with_history): the stored one is not
  // loaded, and recall leaves out this conversation (the caller's history stands for it).
  bool history_given = false;
};

// A Context of the request's text and in.system_prompt, with memory added (add_memory).
Result<BuiltContext> build_context(const ContextInputs& in, const Request& request);

struct MemoryAdded {
  std::string conversation_id;  // empty without a store
  CompactionReport compaction;
};

// Adds what memory holds to `context`, whose system prompt is already the base prompt plus
// skills: the history window, the memory sections and any summary of what fell out of it.
// Without a store nothing changes.
Result<MemoryAdded> add_memory(const ContextInputs& in, const Request& request, Context& context);

// The memory sections of the system prompt (kernex's grammar), each "" when empty.
std::string profile_section(const std::vector<std::pair<std::string, std::string>>& facts);
std::string lessons_section(const std::vector<Lesson>& lessons);
std::string summaries_section(const std::vector<SummaryRecord>& summaries);
std::string recall_section(const std::vector<RecallHit>& hits);
std::string tasks_section(const std::vector<Task>& tasks);
// `now` is "YYYY-MM-DD HH:MM:SS" UTC, for the "(5m ago)" ages.
std::string outcomes_section(const std::vector<OutcomeRecord>& outcomes, const std::string& now);

// "{role}: {content}" lines, as kernex feeds its summarizer.
std::string render_for_summary(const std::vector<ContextEntry>& entries);

}  // namespace kernex
