// Myers' greedy shortest edit script on interned lines, then unified hunks.
#include "kernex/workspace/unified_diff.hpp"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace kernex::workspace {

namespace {

// Lines keep their '\n'; a last line without one differs from the same text with one, as in diff.
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t nl = text.find('\n', start);
    const std::size_t end = nl == std::string_view::npos ? text.size() : nl + 1;
    lines.push_back(text.substr(start, end - start));
    start = end;
  }
  return lines;
}

enum class OpType : std::uint8_t { Equal, Delete, Insert };
struct Op {
  OpType type;
  std::size_t a;  // line index in the old text (Equal, Delete)
  std::size_t b;  // line index in the new text (Equal, Insert)
};

// The trace of V arrays past this many entries (D² / 2) costs too much memory: replace whole.
constexpr std::size_t kMaxTraceEntries = std::size_t{4} << 20;

// Myers' forward greedy search on a[0,n) and b[0,m) (ids). Each step d stores V[-d..d], so the
// path is walked back from the end. Empty when the bound is hit before the end is reached.
std::vector<Op> myers(const std::vector<int>& a, const std::vector<int>& b, std::size_t a0,
                      std::size_t b0, std::size_t max_work) {
  const long n = static_cast<long>(a.size()), m = static_cast<long>(b.size());
  std::vector<std::vector<long>> trace;
  std::vector<long> v(1, 0);  // v[k + d] for k in [-d, d]; d = 0: x = 0 before the snake
  std::size_t work = 0, entries = 0;
  for (long d = 0; d <= n + m; ++d) {
    std::vector<long> next(static_cast<std::size_t>(2 * d + 1));
    auto at = [&](long k) { return v[static_cast<std::size_t>(k + d - 1)]; };  // previous step
    for (long k = -d; k <= d; k += 2) {
      long x;
      if (d == 0)
        x = 0;
      else if (k == -d || (k != d && at(k - 1) < at(k + 1)))
        x = at(k + 1);  // down: an insertion
      else
        x = at(k - 1) + 1;  // right: a deletion
      long y = x - k;
      while (x < n && y < m && a[static_cast<std::size_t>(x)] == b[static_cast<std::size_t>(y)]) {
        ++x, ++y, ++work;
      }
      next[static_cast<std::size_t>(k + d)] = x;
      ++work;
      if (x >= n && y >= m) {
        trace.push_back(std::move(next));
        // Walk back from (n, m).
        std::vector<Op> ops;
        long cx = n, cy = m;
        for (long s = d; s > 0; --s) {
          const auto& prev = trace[static_cast<std::size_t>(s - 1)];
          auto pat = [&](long kk) { return prev[static_cast<std::size_t>(kk + s - 1)]; };
          const long ck = cx - cy;
          const bool down = ck == -s || (ck != s && pat(ck - 1) < pat(ck + 1));
          const long pk = down ? ck + 1 : ck - 1;
          const long px = pat(pk), py = px - pk;
          const long sx = down ? px : px + 1;  // where the snake starts
          while (cx > sx) {
            --cx, --cy;
            ops.push_back({OpType::Equal, a0 + static_cast<std::size_t>(cx),
                           b0 + static_cast<std::size_t>(cy)});
          }
          if (down)
            ops.push_back({OpType::Insert, a0 + static_cast<std::size_t>(px),
                           b0 + static_cast<std::size_t>(py)});
          else
            ops.push_back({OpType::Delete, a0 + static_cast<std::size_t>(px),
                           b0 + static_cast<std::size_t>(py)});
          cx = px, cy = py;
        }
        while (cx > 0) {
          --cx, --cy;
          ops.push_back({OpType::Equal, a0 + static_cast<std::size_t>(cx),
                         b0 + static_cast<std::size_t>(cy)});
        }
        std::reverse(ops.begin(), ops.end());
        return ops;
      }
    }
    entries += next.size();
    if (work > max_work || entries > kMaxTraceEntries) return {};
    trace.push_back(next);
    v = std::move(next);
  }
  return {};
}

// The edit script of the whole texts: common head and tail as Equal, Myers in between (or the
// middle deleted and inserted whole past the bound).
std::vector<Op> edit_script(const std::vector<std::string_view>& a,
                            const std::vector<std::string_view>& b, std::size_t max_work) {
  std::size_t head = 0;
  while (head < a.size() && head < b.size() && a[head] == b[head]) ++head;
  std::size_t tail = 0;
  while (tail < a.size() - head && tail < b.size() - head &&
         a[a.size() - 1 - tail] == b[b.size() - 1 - tail]) {
    ++tail;
  }
  std::unordered_map<std::string_view, int> ids;
  auto intern = [&](std::size_t from, std::size_t to, const std::vector<std::string_view>& lines) {
    std::vector<int> out;
    out.reserve(to - from);
    for (std::size_t i = from; i < to; ++i)
      out.push_back(ids.emplace(lines[i], static_cast<int>(ids.size())).first->second);
    return out;
  };
  const std::vector<int> ma = intern(head, a.size() - tail, a);
  const std::vector<int> mb = intern(head, b.size() - tail, b);

  std::vector<Op> ops;
  for (std::size_t i = 0; i < head; ++i) ops.push_back({OpType::Equal, i, i});
  std::vector<Op> middle = myers(ma, mb, head, head, max_work);
  if (middle.empty() && (!ma.empty() || !mb.empty())) {
    for (std::size_t i = 0; i < ma.size(); ++i) middle.push_back({OpType::Delete, head + i, head});
    for (std::size_t j = 0; j < mb.size(); ++j)
      middle.push_back({OpType::Insert, head + ma.size(), head + j});
  }
  ops.insert(ops.end(), middle.begin(), middle.end());
  for (std::size_t i = 0; i < tail; ++i)
    ops.push_back({OpType::Equal, a.size() - tail + i, b.size() - tail + i});
  return ops;
}

// "-a,b": diff's convention, the count omitted when 1 and the start one before when 0.
std::string range(std::size_t start, std::size_t count) {
  if (count == 1) return std::to_string(start + 1);
  return std::to_string(count == 0 ? start : start + 1) + "," + std::to_string(count);
}

void put_line(std::string& out, char prefix, std::string_view line) {
  out += prefix;
  if (!line.empty() && line.back() == '\n') {
    out += line;
  } else {
    out += line;
    out += "\n\\ No newline at end of file\n";
  }
}

// One hunk: ops[from, to). Each run of changes prints its deletions, then its insertions.
void put_hunk(std::string& out, const std::vector<Op>& ops, std::size_t from, std::size_t to,
              const std::vector<std::string_view>& a, const std::vector<std::string_view>& b) {
  std::size_t a_count = 0, b_count = 0;
  for (std::size_t i = from; i < to; ++i) {
    if (ops[i].type != OpType::Insert) ++a_count;
    if (ops[i].type != OpType::Delete) ++b_count;
  }
  out += "@@ -" + range(ops[from].a, a_count) + " +" + range(ops[from].b, b_count) + " @@\n";
  for (std::size_t i = from; i < to;) {
    if (ops[i].type == OpType::Equal) {
      put_line(out, ' ', a[ops[i].a]);
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < to && ops[end].type != OpType::Equal) ++end;
    for (std::size_t j = i; j < end; ++j)
      if (ops[j].type == OpType::Delete) put_line(out, '-', a[ops[j].a]);
    for (std::size_t j = i; j < end; ++j)
      if (ops[j].type == OpType::Insert) put_line(out, '+', b[ops[j].b]);
    i = end;
  }
}

}  // namespace

std::string unified_hunks(std::string_view old_text, std::string_view new_text,
                          const DiffOptions& options) {
  const auto a = split_lines(old_text);
  const auto b = split_lines(new_text);
  const std::vector<Op> ops = edit_script(a, b, options.max_work);
  std::string out;
  const std::size_t ctx = options.context;
  std::size_t i = 0;
  while (i < ops.size()) {
    while (i < ops.size() && ops[i].type == OpType::Equal) ++i;
    if (i == ops.size()) break;
    const std::size_t from = i > ctx ? i - ctx : 0;
    // Extend over changes closer than 2 × context apart.
    std::size_t last_change = i;
    std::size_t j = i;
    while (j < ops.size()) {
      if (ops[j].type != OpType::Equal) {
        last_change = j;
        ++j;
        continue;
      }
      if (j - last_change > 2 * ctx) break;
      ++j;
    }
    const std::size_t to = std::min(ops.size(), last_change + 1 + ctx);
    put_hunk(out, ops, from, to, a, b);
    i = to;
  }
  return out;
}

}  // namespace kernex::workspace
