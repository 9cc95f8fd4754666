// One HTTP/2 connection's budget against rapid reset (src/rls/reset_budget.h), on a manual clock.
#include "rls/reset_budget.h"

#include <gtest/gtest.h>

namespace tollgate::rls {
namespace {

constexpr int64_t kMs = 1'000'000;

// Opens a stream at `at` and closes it `after` later, answered or not; returns close()'s verdict.
bool stream(ResetBudget& b, int64_t at, int64_t after, bool answered) {
  EXPECT_TRUE(b.open());
  const bool spent = b.close(at, at + after, answered);
  b.done();
  return spent;
}

TEST(ResetBudget, HalfAWindowOfStreamsResetAtOnceEndsTheConnection) {
  ResetBudget b;  // 250 premature of 500
  int64_t t = 0;
  for (int i = 0; i < 249; ++i) EXPECT_FALSE(stream(b, t += kMs, 0, false)) << i;
  EXPECT_TRUE(stream(b, t += kMs, 0, false));
  EXPECT_TRUE(b.spent());
  EXPECT_EQ(b.stats().premature, 250u);
  EXPECT_EQ(b.in_flight(), 0u);
}

TEST(ResetBudget, AnsweredOrLateClosesAreNotPremature) {
  ResetBudget b;
  int64_t t = 0;
  // Envoy's normal calls: answered, then closed; and streams a slow client gave up on after 1 s.
  for (int i = 0; i < 10'000; ++i) {
    EXPECT_FALSE(stream(b, t += kMs, 1 * kMs, true));
    EXPECT_FALSE(stream(b, t += kMs, 1000 * kMs, false));
  }
  EXPECT_EQ(b.stats().premature, 0u);
  EXPECT_FALSE(b.spent());
}

TEST(ResetBudget, EachWindowIsJudgedOnItsOwn) {
  ResetBudget b;
  int64_t t = 0;
  // 249 premature closes in every window of 500, for 20 windows: Envoy's timeouts on a slow day,
  // never half of a window. The connection stays.
  for (int w = 0; w < 20; ++w) {
    for (int i = 0; i < 249; ++i) EXPECT_FALSE(stream(b, t += kMs, 20 * kMs, false));
    for (int i = 0; i < 251; ++i) EXPECT_FALSE(stream(b, t += kMs, 1 * kMs, true));
  }
  EXPECT_EQ(b.stats().premature, 20u * 249);
  EXPECT_FALSE(b.spent());
  // The window just started afresh: 250 more premature closes within it end it.
  for (int i = 0; i < 249; ++i) EXPECT_FALSE(stream(b, t += kMs, 0, false));
  EXPECT_TRUE(stream(b, t += kMs, 0, false));
}

TEST(ResetBudget, WorkInFlightIsBoundedEvenForStreamsAlreadyReset) {
  ResetBudgetOptions o;
  o.max_in_flight = 3;
  ResetBudget b(o);
  EXPECT_TRUE(b.open());
  EXPECT_TRUE(b.open());
  EXPECT_TRUE(b.open());
  EXPECT_FALSE(b.open());  // REFUSED_STREAM, the connection lives
  EXPECT_EQ(b.stats().refused, 1u);
  // Two reset by the client while their calls are still being decided: still counted.
  EXPECT_FALSE(b.close(0, kMs, false));
  EXPECT_FALSE(b.close(0, kMs, false));
  EXPECT_FALSE(b.open());
  b.done();  // one decision ended
  EXPECT_EQ(b.in_flight(), 2u);
  EXPECT_TRUE(b.open());
  EXPECT_EQ(b.stats().opened, 4u);
  EXPECT_EQ(b.stats().refused, 2u);
}

TEST(ResetBudget, ASpentBudgetStaysSpent) {
  ResetBudgetOptions o;
  o.window = 4;
  o.max_premature = 2;
  ResetBudget b(o);
  EXPECT_FALSE(stream(b, 0, 0, false));
  EXPECT_TRUE(stream(b, 0, 0, false));
  EXPECT_TRUE(stream(b, 0, kMs, true));  // whatever comes next
  EXPECT_TRUE(b.spent());
}

}  // namespace
}  // namespace tollgate::rls
