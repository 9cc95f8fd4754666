// A stat's declaration, written once beside the code that owns the stat: its name (as `tollgate
// stats` and /v1/stats show it), whether it only goes up or is a current value, its unit, and
// what it means. /metrics reads the kind, unit and help from here; nothing decides them from
// the name. An owner's stats() emits its stats by iterating its own table, so a stat cannot be
// reported without being declared.
//
// A name may hold one '*', standing for a part that varies (transport_dropped_*: one stat per
// reason; api.thread.*.checks: one per client API thread).
#ifndef TOLLGATE_SRC_UTIL_STAT_DEF_H_
#define TOLLGATE_SRC_UTIL_STAT_DEF_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/types.h"

namespace tollgate {

enum class StatKind : uint8_t { kCounter, kGauge };
enum class StatUnit : uint8_t { kNone, kBytes, kNanoseconds };

struct StatDef {
  std::string_view name;
  StatKind kind = StatKind::kCounter;
  std::string_view help;
  StatUnit unit = StatUnit::kNone;
};

// A row of an owner's table: a declaration and the member counter it reads (an atomic or a
// RelaxedCounter: anything convertible to an integer).
template <class Owner, class Counter>
struct StatField {
  StatDef def;
  Counter Owner::*field;
};

// What an owner's stats() does with its table: each row's name and current value, in order.
template <class Owner, class Counter>
void append_stats(std::span<const StatField<Owner, Counter>> rows, const Owner& owner, StatsList& out) {
  for (const auto& r : rows) out.emplace_back(std::string(r.def.name), static_cast<int64_t>(owner.*r.field));
}
// And what its stat_defs() does: the rows' declarations.
template <class Row>
void append_stat_defs(std::span<const Row> rows, std::vector<StatDef>& out) {
  for (const Row& r : rows) out.push_back(r.def);
}

// Every stat a process reports, from its owners' tables (copied: a prefix may be added, as the
// metrics listener's "metrics_" before HTTP's names).
class StatCatalog {
 public:
  struct Entry {
    std::string name;  // may hold one '*'
    StatKind kind;
    std::string help;
    StatUnit unit;
  };
  void add(std::span<const StatDef> defs, std::string_view prefix = "") {
    for (const StatDef& d : defs)
      entries_.push_back({std::string(prefix) + std::string(d.name), d.kind, std::string(d.help), d.unit});
  }
  // The declaration of `name`: an exact one, else a family whose prefix and suffix it has; null
  // when none declares it.
  const Entry* find(std::string_view name) const {
    const Entry* family = nullptr;
    for (const Entry& e : entries_) {
      const size_t star = e.name.find('*');
      if (star == std::string::npos) {
        if (e.name == name) return &e;
        continue;
      }
      const std::string_view prefix = std::string_view(e.name).substr(0, star);
      const std::string_view suffix = std::string_view(e.name).substr(star + 1);
      if (name.size() > prefix.size() + suffix.size() && name.starts_with(prefix) && name.ends_with(suffix))
        family = &e;
    }
    return family;
  }
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::vector<Entry> entries_;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_UTIL_STAT_DEF_H_
