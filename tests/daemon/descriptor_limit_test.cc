#include "daemon/descriptor_limit.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

namespace tollgate {
namespace {

// A soft limit below what the connection limits need is raised (towards the hard limit); one
// the hard limit cannot cover is reported with the numbers and the way to raise it.
TEST(DescriptorLimit, ASoftLimitBelowTheNeedIsRaisedAndAnUnreachableOneIsReported) {
  rlimit original{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &original), 0);
  if (original.rlim_max != RLIM_INFINITY && original.rlim_max < 2048)
    GTEST_SKIP() << "hard limit " << original.rlim_max;
  rlimit low = original;
  low.rlim_cur = 256;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  EXPECT_EQ(ensure_descriptor_limit(2048), "");
  rlimit now{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &now), 0);
  EXPECT_GE(now.rlim_cur, 2048u);
  if (original.rlim_max != RLIM_INFINITY) {
    const std::string warning = ensure_descriptor_limit(uint64_t(original.rlim_max) + 1);
    EXPECT_NE(warning.find("LimitNOFILE"), std::string::npos) << warning;
    EXPECT_NE(warning.find(std::to_string(original.rlim_max + 1)), std::string::npos) << warning;
  }
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &original), 0);
}

}  // namespace
}  // namespace tollgate
