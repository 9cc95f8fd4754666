// Reads of a node's key table that no door charges for: a key's balance (GET /v1/balance) and
// the rules in force with their counts (GET /v1/rules). One implementation for every
// RequestHandler that holds a table (the daemon's, the tests').
#ifndef TOLLGATE_SRC_REQUEST_TABLE_READS_H_
#define TOLLGATE_SRC_REQUEST_TABLE_READS_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/clock.h"
#include "core/key_table.h"
#include "request/request_handler.h"

namespace tollgate {

// `key`'s bucket refilled to `now`, without charging it or counting as a use for eviction.
KeyBalance read_balance(KeyTable& table, std::string_view key, MonoNanos now);

// The first `max` rules of the table's RuleSet in precedence order, each with this table's
// counters under its label; `version` is the rules text's content version.
RulesInForce read_rules_in_force(const KeyTable& table, int64_t version, size_t max);

}  // namespace tollgate

#endif  // TOLLGATE_SRC_REQUEST_TABLE_READS_H_
