// The conversation the memory benches load, the same texts for every store: numbered questions on
// 97 topics and 31 cities, each with its answer.
#pragma once

#include <string>
#include <vector>

#include "kernex/context.hpp"

namespace kernex::bench {

inline std::string user_text(int i) {
  return "question " + std::to_string(i) + " about topic" + std::to_string(i % 97) +
         " and the weather in city" + std::to_string(i % 31) + ", please answer briefly";
}

// Exchanges first .. first + count - 1: each a question and its answer.
inline std::vector<ContextEntry> exchanges(int first, int count) {
  std::vector<ContextEntry> batch;
  for (int k = first; k < first + count; ++k) {
    batch.push_back(ContextEntry::user(user_text(k)));
    batch.push_back(
        ContextEntry::assistant("answer " + std::to_string(k) + ": it depends on the season"));
  }
  return batch;
}

}  // namespace kernex::bench
