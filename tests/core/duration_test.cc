#include "tollgate/duration.h"

#include <gtest/gtest.h>

#include "core/clock.h"

namespace tollgate {
namespace {

TEST(Duration, ParsesEveryUnit) {
  EXPECT_EQ(parse_duration_ns("50ms"), 50 * kNanosPerMilli);
  EXPECT_EQ(parse_duration_ns("2s"), 2 * kNanosPerSecond);
  EXPECT_EQ(parse_duration_ns("5m"), 300 * kNanosPerSecond);
  EXPECT_EQ(parse_duration_ns("1h"), 3600 * kNanosPerSecond);
  EXPECT_EQ(parse_duration_ns("7us"), 7 * kNanosPerMicro);
  EXPECT_EQ(parse_duration_ns("9ns"), 9);
  EXPECT_EQ(parse_duration_ns("0s"), 0);
}

TEST(Duration, RejectsWithAReason) {
  for (const char* bad :
       {"", "50", "ms", "-1s", "1.5s", "5 s", "5sec", "10d", "99999999999999999999s", "9999999999h"}) {
    std::string why;
    EXPECT_FALSE(parse_duration_ns(bad, &why).has_value()) << bad;
    EXPECT_NE(why.find("duration \""), std::string::npos) << bad << ": " << why;
  }
}

TEST(Duration, FormatsTheShortestExactSpelling) {
  EXPECT_EQ(format_duration(50 * kNanosPerMilli), "50ms");
  EXPECT_EQ(format_duration(2 * kNanosPerSecond), "2s");
  EXPECT_EQ(format_duration(90 * kNanosPerSecond), "90s");
  EXPECT_EQ(format_duration(120 * kNanosPerSecond), "2m");
  EXPECT_EQ(format_duration(1500 * kNanosPerMicro), "1500us");
  EXPECT_EQ(format_duration(0), "0s");
}

}  // namespace
}  // namespace tollgate
