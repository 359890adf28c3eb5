#include "hot_history.hpp"

#include <algorithm>
#include <iterator>

namespace kernex::sqlite {
namespace {

std::size_t entry_bytes(const HotMessage& m) {
  const ContextEntry& e = m.entry;
  std::size_t n = 64 + e.role.size() + e.content.size();
  if (e.tool_result) n += e.tool_result->content.size();
  for (const auto& call : e.tool_calls) n += 64 + call.name.size() + call.id.size();
  if (m.columns) {
    for (const auto* c : {&m.columns->calls, &m.columns->result, &m.columns->state})
      n += c->has_value() ? (*c)->size() : 0;
  }
  return n;
}

std::vector<HotMessage> as_kept(const std::vector<ContextEntry>& read) {
  std::vector<HotMessage> out;
  out.reserve(read.size());
  for (const auto& e : read) out.push_back({e, std::nullopt});
  return out;
}

}  // namespace

std::string HotHistory::key(const std::string& tenant, const std::string& id) {
  return tenant + '/' + id;  // a tenant name holds no '/'
}

HotHistory::Entry* HotHistory::find(const std::string& k) {
  auto it = entries_.find(k);
  if (it == entries_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return &it->second;
}

HotHistory::Entry& HotHistory::slot(const std::string& k) {
  if (Entry* e = find(k)) return *e;
  lru_.push_front(k);
  Entry& e = entries_[k];
  e.lru = lru_.begin();
  return e;
}

void HotHistory::set_newest(Entry& e, std::vector<HotMessage> newest) {
  e.newest = std::move(newest);
  recount(e);
  trim(e);
}

void HotHistory::recount(Entry& e) {
  bytes_ -= e.bytes;
  e.bytes = 0;
  for (const auto& m : e.newest) e.bytes += entry_bytes(m);
  bytes_ += e.bytes;
}

void HotHistory::trim(Entry& e) {
  const std::size_t keep = std::min(std::max(e.want, limits_.min_messages), limits_.max_messages);
  if (e.newest.size() <= keep) return;
  e.whole = false;
  const auto drop = static_cast<std::ptrdiff_t>(e.newest.size() - keep);
  for (auto it = e.newest.begin(); it != e.newest.begin() + drop; ++it) {
    const std::size_t n = entry_bytes(*it);
    e.bytes -= n;
    bytes_ -= n;
  }
  e.newest.erase(e.newest.begin(), e.newest.begin() + drop);
}

void HotHistory::erase(const std::string& k) {
  auto it = entries_.find(k);
  if (it == entries_.end()) return;
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

// Least recently used first; an entry with a save in flight stays (it counts that save).
void HotHistory::evict() {
  auto it = lru_.end();
  while ((entries_.size() > limits_.conversations || bytes_ > limits_.bytes) &&
         it != lru_.begin()) {
    --it;
    const std::string k = *it;
    if (entries_.at(k).saving > 0) continue;
    it = std::next(it);
    erase(k);
  }
}

std::optional<std::vector<ContextEntry>> HotHistory::newest(const std::string& tenant,
                                                            const std::string& id,
                                                            std::size_t limit) {
  Entry* e = find(key(tenant, id));
  if (e == nullptr || !e->valid || e->saving > 0) return std::nullopt;
  if (e->newest.size() < limit && !e->whole) return std::nullopt;
  e->want = std::max(e->want, limit);
  const auto from =
      e->newest.end() - static_cast<std::ptrdiff_t>(std::min(limit, e->newest.size()));
  bool decoded = false;
  if (!decode(from, e->newest.end(), decoded)) {
    forget(tenant, id);
    return std::nullopt;
  }
  std::vector<ContextEntry> out;
  out.reserve(static_cast<std::size_t>(e->newest.end() - from));
  for (auto it = from; it != e->newest.end(); ++it) out.push_back(it->entry);
  if (decoded) {  // decoded entries count differently: the bound holds after (e may go)
    recount(*e);
    evict();
  }
  return out;
}

// Decoded in place, as a read of the file decodes the columns (the caller counts the bytes again).
bool HotHistory::decode(std::vector<HotMessage>::iterator from,
                        std::vector<HotMessage>::iterator to, bool& decoded) {
  for (auto it = from; it != to; ++it) {
    if (!it->columns) continue;
    decoded = true;
    auto& c = *it->columns;
    auto back = decode_columns({0, it->entry.role, it->entry.content, std::move(c.calls),
                                std::move(c.result), std::move(c.state)},
                               "memory-sqlite");
    if (!back) return false;
    it->entry = std::move(*back);
    it->columns.reset();
  }
  return true;
}

std::optional<std::uint64_t> HotHistory::count(const std::string& tenant, const std::string& id) {
  Entry* e = find(key(tenant, id));
  if (e == nullptr || !e->valid || e->saving > 0) return std::nullopt;
  return e->count;
}

void HotHistory::read(const std::string& tenant, const std::string& id, std::size_t limit,
                      const std::vector<ContextEntry>& window) {
  Entry& e = slot(key(tenant, id));
  if (e.saving > 0) return;  // the read may or may not have seen the save
  if (!e.valid) e.count.reset();
  e.valid = true;
  e.want = std::max(e.want, limit);
  // Fewer than asked: that is all of them (a conversation of another tenant reads as none, so
  // only the count, which tells it apart, is not taken from here).
  e.whole = window.size() < limit;
  set_newest(e, as_kept(window));
  evict();
}

void HotHistory::read_count(const std::string& tenant, const std::string& id, std::uint64_t count) {
  Entry& e = slot(key(tenant, id));
  if (e.saving > 0) return;
  if (!e.valid) {
    e.whole = false;
    set_newest(e, {});
  }
  e.valid = true;
  e.count = count;
  evict();
}

void HotHistory::opened(const std::string& tenant, const std::string& id, bool queued) {
  Entry& e = slot(key(tenant, id));
  if (e.saving > 0) return;
  e.fresh = queued;
  e.whole = true;
  set_newest(e, {});
  e.valid = true;
  e.count = 0;
  evict();
}

bool HotHistory::fresh(const std::string& tenant, const std::string& id) {
  Entry* e = find(key(tenant, id));
  return e != nullptr && e->valid && e->fresh && e->saving == 0;
}

void HotHistory::committed(const std::string& tenant, const std::string& id) {
  if (Entry* e = find(key(tenant, id))) e->fresh = false;
}

void HotHistory::saving(const std::string& tenant, const std::string& id) {
  Entry& e = slot(key(tenant, id));
  ++e.saving;
  e.fresh = false;
}

void HotHistory::saved(const std::string& tenant, const std::string& id,
                       std::optional<std::vector<HotMessage>> saved) {
  const std::string k = key(tenant, id);
  Entry* e = find(k);
  if (e == nullptr || e->saving == 0) return;
  // Extended only when this was the one save in flight: two at once may have committed in
  // either order.
  if (--e->saving == 0 && e->valid && saved) {
    std::vector<HotMessage> newest = std::move(e->newest);
    newest.insert(newest.end(), std::make_move_iterator(saved->begin()),
                  std::make_move_iterator(saved->end()));
    if (e->count) *e->count += saved->size();
    set_newest(*e, std::move(newest));
    evict();
    return;
  }
  e->valid = false;
  e->count.reset();
  set_newest(*e, {});
  if (e->saving == 0) erase(k);
}

void HotHistory::forget(const std::string& tenant, const std::string& id) {
  const std::string k = key(tenant, id);
  Entry* e = find(k);
  if (e == nullptr) return;
  if (e->saving == 0) return erase(k);
  e->valid = false;
  e->count.reset();
  set_newest(*e, {});
}

void HotHistory::clear() {
  std::vector<std::string> keys;
  keys.reserve(entries_.size());
  for (const auto& [k, e] : entries_) keys.push_back(k);
  for (const auto& k : keys) {
    auto it = entries_.find(k);
    if (it->second.saving == 0) {
      erase(k);
    } else {
      it->second.valid = false;
      it->second.count.reset();
      set_newest(it->second, {});
    }
  }
}

}  // namespace kernex::sqlite
