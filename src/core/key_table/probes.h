// Part of the key table (core/key_table.cc): an all-or-nothing request's distinct limited keys,
// with their buckets as allow_all's first phase sees them. Looked up linearly for small
// requests, by an index for large ones. One per thread, reused from request to request.
#ifndef TOLLGATE_SRC_CORE_KEY_TABLE_PROBES_H_
#define TOLLGATE_SRC_CORE_KEY_TABLE_PROBES_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/token_bucket.h"
#include "tollgate/limit.h"
#include "tollgate/rules.h"

namespace tollgate::key_table {

// One key of the request: its bucket as the request has left it so far, and as it was.
struct Probe {
  std::string_view key;
  TokenBucket bucket, before;
  Limit limit;
  uint32_t rule = RuleSet::kUnlimited;
};

class Probes {
 public:
  void clear() {
    probes_.clear();
    index_.clear();
  }
  Probe* find(std::string_view key) {
    if (probes_.size() <= kLinear) {
      for (Probe& p : probes_) {
        if (p.key == key) return &p;
      }
      return nullptr;
    }
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &probes_[it->second];
  }
  std::vector<Probe>& all() { return probes_; }
  // Adds a key not found; the pointer is valid until the next add() or clear().
  Probe* add(const Probe& p) {
    probes_.push_back(p);
    if (probes_.size() == kLinear + 1) {
      for (size_t i = 0; i < probes_.size(); ++i) index_.emplace(probes_[i].key, i);
    } else if (probes_.size() > kLinear + 1) {
      index_.emplace(p.key, probes_.size() - 1);
    }
    return &probes_.back();
  }

 private:
  static constexpr size_t kLinear = 16;
  std::vector<Probe> probes_;
  std::unordered_map<std::string_view, size_t> index_;
};

}  // namespace tollgate::key_table

#endif  // TOLLGATE_SRC_CORE_KEY_TABLE_PROBES_H_
