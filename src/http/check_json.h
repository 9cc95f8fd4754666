// GET and POST /v1/check's answers as JSON. Written straight into the answer: protobuf's JSON
// printer (reflection, a tree of nodes, an allocation each) took about a third of the HTTP
// thread's time per check (perf, issue 38). The shape is still the message's,
// tollgate.http.v1.CheckResult printed with its field names and every primitive field: the
// protobuf form is kept here (fill_check_result) as the reference, and a test parses what the
// fast writer wrote with protobuf's JSON parser and compares it, field for field, with it.
#ifndef TOLLGATE_SRC_HTTP_CHECK_JSON_H_
#define TOLLGATE_SRC_HTTP_CHECK_JSON_H_

#include <string>

#include "tollgate/decision.h"
#include "tollgate/types.h"

namespace tollgate::http {

namespace v1 {
class CheckResult;
class Limit;
}  // namespace v1

// One decision's object: {"key": ..., "cost": "N", "allowed": ..., ...}, no newline.
void append_check_result_json(std::string& out, const CheckItem& item, const Decision& d);

// `limit` as the message CheckResult and BalanceResult carry.
void fill_limit(const Limit& limit, v1::Limit& out);

// The same decision as the message (the reference the writer is tested against).
void fill_check_result(const CheckItem& item, const Decision& d, v1::CheckResult& r);

}  // namespace tollgate::http

#endif  // TOLLGATE_SRC_HTTP_CHECK_JSON_H_
