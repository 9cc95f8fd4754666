#ifndef TOLLGATE_BENCH_RLS_NOOP_H2_H_
#define TOLLGATE_BENCH_RLS_NOOP_H2_H_

#include <string>

namespace tollgate::bench {

// Serves the do-nothing rate limit service with libnghttp2 on this thread until SIGTERM or
// SIGINT (bench/rls_noop_h2.cc). Returns the exit status.
int serve_nghttp2(const std::string& listen);

}  // namespace tollgate::bench

#endif  // TOLLGATE_BENCH_RLS_NOOP_H2_H_
