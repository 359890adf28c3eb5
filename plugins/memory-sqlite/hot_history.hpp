// The newest messages of the conversations this store read or wrote lately, so a hot session's
// next turn extends what its previous turn had instead of reading its history again. Keyed by
// tenant and conversation id; bounded (least recently used out first, by count and by bytes).
// The store keeps it current: it extends an entry with what its own connection saved, forgets
// one its own connection deleted, and clears everything when another connection (another
// process, another store object on the file) committed anything (PRAGMA data_version).
// A message saved here with JSON columns is kept as the columns' text, as written to the file, and
// decoded as a read of the file would decode it when a read first asks for it: most conversations
// end with their turn and never pay for the decode.
// Not thread-safe: the store calls it under its mutex.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernex/context.hpp"
#include "message_columns.hpp"

namespace kernex::sqlite {

// A message as kept: `entry` holds its role and content, and the rest once `columns` (its JSON
// columns as stored, not decoded yet) is empty.
struct HotMessage {
  ContextEntry entry;
  std::optional<EncodedColumns> columns;
};

class HotHistory {
 public:
  struct Limits {
    std::size_t conversations = 256;
    std::size_t bytes = 32u << 20;    // message text kept, all entries together
    std::size_t min_messages = 64;    // kept per entry before any read asked for a window
    std::size_t max_messages = 4096;  // kept per entry whatever a read asked for
  };
  HotHistory() : HotHistory(Limits{}) {}
  explicit HotHistory(Limits limits) : limits_(limits) {}

  // The newest `limit` messages, oldest first, when this knows them (and they decode: one that
  // does not is left to a read of the file, which reports it).
  std::optional<std::vector<ContextEntry>> newest(const std::string& tenant, const std::string& id,
                                                  std::size_t limit);
  std::optional<std::uint64_t> count(const std::string& tenant, const std::string& id);
  // What a read found: the newest `limit` messages (fewer: that is all of them).
  void read(const std::string& tenant, const std::string& id, std::size_t limit,
            const std::vector<ContextEntry>& window);
  void read_count(const std::string& tenant, const std::string& id, std::uint64_t count);
  // A conversation this connection creates: no messages. `queued`: its row is not committed yet,
  // so no other connection can have written to it (fresh() holds until committed()).
  void opened(const std::string& tenant, const std::string& id, bool queued);
  bool fresh(const std::string& tenant, const std::string& id);
  void committed(const std::string& tenant, const std::string& id);
  // A save of the conversation's messages begins: until it ends, reads are not taken in.
  void saving(const std::string& tenant, const std::string& id);
  // It ended: `saved` holds the messages as stored (appended), or nothing when the save failed or
  // may have saved nothing (the entry is forgotten then).
  void saved(const std::string& tenant, const std::string& id,
             std::optional<std::vector<HotMessage>> saved);
  void forget(const std::string& tenant, const std::string& id);
  void clear();
  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::vector<HotMessage> newest;      // oldest first
    std::optional<std::uint64_t> count;  // every message of the conversation, when known
    bool whole = false;                  // `newest` holds every message the tenant can read
    bool fresh = false;                  // opened here, its row not committed: surely empty
    std::size_t want = 0;                // the largest window a read asked for
    std::size_t bytes = 0;
    int saving = 0;      // saves in flight
    bool valid = false;  // false: nothing known (a placeholder while saves are in flight)
    std::list<std::string>::iterator lru;
  };
  static std::string key(const std::string& tenant, const std::string& id);
  Entry* find(const std::string& k);  // and marks it used
  Entry& slot(const std::string& k);  // found or made
  void set_newest(Entry& e, std::vector<HotMessage> newest);
  void recount(Entry& e);  // e.bytes (and bytes_) from what e holds now
  // False when one does not decode; `decoded`: set when any was.
  static bool decode(std::vector<HotMessage>::iterator from, std::vector<HotMessage>::iterator to,
                     bool& decoded);
  void trim(Entry& e);
  void erase(const std::string& k);
  void evict();

  Limits limits_;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> lru_;  // most recently used first
  std::size_t bytes_ = 0;
};

}  // namespace kernex::sqlite
