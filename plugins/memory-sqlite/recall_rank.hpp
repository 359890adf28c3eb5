// How both memory stores rank recall hits: each message or summary once, lower rank first, hits
// matching every word ahead of any partial match. The SQLite store's file, used by memory-postgres
// too (like text_rules), so both stores answer a query in the same order.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernex/memory.hpp"

namespace kernex::sqlite {

// The hits found so far, with their rank (lower first: bm25's sign), each message or summary once.
struct RankedHits {
  std::vector<std::pair<double, RecallHit>> ranked;
  std::set<std::pair<std::string, std::int64_t>> seen;  // (conversation, seq): summaries have seq 0

  // A hit found already (by an earlier, better search) keeps its first rank.
  void add(double rank, RecallHit hit) {
    if (seen.insert({hit.conversation_id, hit.seq}).second)
      ranked.push_back({rank, std::move(hit)});
  }
  // The hits so far (every word's) rank before any found later, whatever a partial match scores.
  void rank_first() {
    for (auto& [rank, hit] : ranked) rank -= 1e9;
  }
  // The first `limit` by rank, ties in the order found.
  std::vector<RecallHit> best(std::size_t limit) {
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<RecallHit> out;
    for (auto& [rank, hit] : ranked) {
      if (out.size() == limit) break;
      out.push_back(std::move(hit));
    }
    return out;
  }
};

}  // namespace kernex::sqlite
