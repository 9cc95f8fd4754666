// The Envoy RLS decision apart from gRPC (src/rls/decide.h): plan_request's validation and keys,
// and decide's answers against a real KeyTable behind a minimal RequestHandler.
#include "rls/decide.h"

#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/key_table.h"
#include "request/request_handler.h"
#include "rls/value_metrics.h"
#include "support/table_handler.h"
#include "tollgate/config_error.h"
#include "tollgate/rls_config.h"
#include "tollgate/rls_config_file.h"
#include "tollgate/rules.h"

namespace tollgate::rls {
namespace {

constexpr int64_t kSec = kNanosPerSecond;
constexpr int64_t kMs = kNanosPerSecond / 1000;
constexpr uint32_t kUnlimitedRemaining = std::numeric_limits<uint32_t>::max();

// The daemon's request path reduced to a key table on a hand-driven clock, whose rules are
// an RLS config's.
struct TableHandler : testing::TableHandler {
  explicit TableHandler(std::shared_ptr<const RlsConfig> config)
      : testing::TableHandler(std::make_shared<const RuleSet>(std::vector<Rule>{}, std::nullopt, std::move(config))) {}
};

const char* const kConfig = R"(domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: m
    rate_limit: {unit: minute, requests_per_unit: 20, name: per_minute}
  - key: free
    rate_limit: {unlimited: true}
  - key: block
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: shadowblock
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: user
    rate_limit: {name: base, unit: second, requests_per_unit: 5}
  - key: vip
    rate_limit: {replaces: [{name: base}], unit: second, requests_per_unit: 50}
  - key: placeholder
  - key: llm
    rate_limit: {unit: second, requests_per_unit: 10, max_debt: 30, charge_when_over: true}
)";

DescriptorInput desc(std::initializer_list<RlsEntry> entries, std::optional<uint64_t> hits = std::nullopt) {
  DescriptorInput in;
  in.entries.assign(entries.begin(), entries.end());
  if (hits) {
    in.has_hits = true;
    in.hits = *hits;
  }
  return in;
}

class RlsDecide : public ::testing::Test {
 protected:
  RlsDecide() : RlsDecide(kConfig) {}
  explicit RlsDecide(const char* config) : config_(parse_rls_config({{"rls.yaml", config}})), handler_(config_) {}

  // Plans (expecting no error) and decides one request; results in `out`.
  Code run(const std::vector<DescriptorInput>& descriptors, uint32_t request_hits = 0, std::string_view domain = "d") {
    Plan plan;
    const std::string error = plan_request(config_, domain, request_hits, descriptors, 256, plan);
    EXPECT_EQ(error, "");
    EXPECT_EQ(plan.descriptors.size(), descriptors.size());
    return decide(handler_, plan, out);
  }

  // The limit a single-entry descriptor of domain "d" resolves to.
  const RlsLimit* limit_of(std::string_view key) const {
    const RlsEntry e{key, "x"};
    return config_->match("d", {&e, 1}).limit;
  }

  // Whole tokens left in the bucket of (key=value), by a check-only request.
  uint32_t remaining(std::string_view key, std::string_view value) {
    std::vector<DescriptorResult> saved = out;
    EXPECT_EQ(run({desc({{key, value}}, 0)}), Code::kOk);
    const uint32_t r = out[0].remaining;
    out = saved;
    return r;
  }

  std::shared_ptr<const RlsConfig> config_;
  TableHandler handler_;
  std::vector<DescriptorResult> out;
};

DescriptorInput refund(std::initializer_list<RlsEntry> entries, uint64_t hits) {
  DescriptorInput in = desc(entries, hits);
  in.is_negative_hits = true;
  return in;
}

// --- limited descriptors -----------------------------------------------------------------------

TEST_F(RlsDecide, FirstHitReportsTheLimitAndWhatIsLeft) {
  EXPECT_EQ(run({desc({{"a", "x"}})}), Code::kOk);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].code, Code::kOk);
  EXPECT_EQ(out[0].limit, limit_of("a"));
  ASSERT_NE(out[0].limit, nullptr);
  EXPECT_EQ(out[0].limit->requests_per_unit, 5u);
  EXPECT_EQ(out[0].remaining, 4u);
  EXPECT_EQ(out[0].until_full_ns, 200 * kMs);  // one token at 5/s
  EXPECT_EQ(out[0].retry_after_ns, 0);
  EXPECT_FALSE(out[0].shadow_over);
}

TEST_F(RlsDecide, TwentyFivePerMinuteOnTwentyPerMinute) {
  // The reference's "25 hits on 20/min", on a token bucket at one instant.
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(run({desc({{"m", "random"}})}), Code::kOk) << i;
    EXPECT_EQ(out[0].remaining, uint32_t(19 - i)) << i;
    EXPECT_EQ(out[0].until_full_ns, (i + 1) * 3 * kSec) << i;  // 3 s a token
  }
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(run({desc({{"m", "random"}})}), Code::kOverLimit) << i;
    EXPECT_EQ(out[0].code, Code::kOverLimit);
    EXPECT_EQ(out[0].remaining, 0u);
    EXPECT_EQ(out[0].limit, limit_of("m"));
    EXPECT_EQ(out[0].retry_after_ns, 3 * kSec);
    EXPECT_EQ(out[0].until_full_ns, 60 * kSec);
  }
}

TEST_F(RlsDecide, UntilFullIsExactAtTheInstantOfTheHit) {
  EXPECT_EQ(run({desc({{"m", "x"}})}), Code::kOk);
  EXPECT_EQ(out[0].remaining, 19u);
  EXPECT_EQ(out[0].until_full_ns, 3 * kSec);  // 20/min after 1 hit: 3 s exactly
  EXPECT_EQ(run({desc({{"m", "fresh"}}, 0)}), Code::kOk);
  EXPECT_EQ(out[0].remaining, 20u);
  EXPECT_EQ(out[0].until_full_ns, 0);  // a full bucket
  // After the bucket refilled: full again.
  handler_.now = 3 * kSec;
  EXPECT_EQ(run({desc({{"m", "x"}}, 0)}), Code::kOk);
  EXPECT_EQ(out[0].remaining, 20u);
  EXPECT_EQ(out[0].until_full_ns, 0);
}

TEST_F(RlsDecide, RetryAfterSaysWhenTheSameCostPasses) {
  EXPECT_EQ(run({desc({{"b", "r"}})}), Code::kOk);
  EXPECT_EQ(run({desc({{"b", "r"}})}), Code::kOverLimit);
  EXPECT_EQ(out[0].retry_after_ns, 1 * kSec);
  EXPECT_EQ(out[0].until_full_ns, 1 * kSec);
  handler_.now = 250 * kMs;
  EXPECT_EQ(run({desc({{"b", "r"}})}), Code::kOverLimit);
  EXPECT_EQ(out[0].retry_after_ns, 750 * kMs);
  handler_.now = 1 * kSec;
  EXPECT_EQ(run({desc({{"b", "r"}})}), Code::kOk);
  EXPECT_EQ(out[0].remaining, 0u);
  // A cost above the bucket's capacity never passes.
  EXPECT_EQ(run({desc({{"a", "big"}}, 6)}), Code::kOverLimit);
  EXPECT_EQ(out[0].code, Code::kOverLimit);
  EXPECT_EQ(out[0].retry_after_ns, kRetryNever);
  EXPECT_EQ(remaining("a", "big"), 5u);
}

TEST_F(RlsDecide, PerValueBucketsAreIndependent) {
  for (int i = 0; i < 5; ++i) EXPECT_EQ(run({desc({{"a", "one"}})}), Code::kOk);
  EXPECT_EQ(run({desc({{"a", "one"}})}), Code::kOverLimit);
  EXPECT_EQ(run({desc({{"a", "two"}})}), Code::kOk);
  EXPECT_EQ(out[0].remaining, 4u);
}

// --- all or nothing ----------------------------------------------------------------------------

TEST_F(RlsDecide, AllOrNothingOneOverChargesNone) {
  EXPECT_EQ(run({desc({{"a", "x"}}), desc({{"b", "y"}})}), Code::kOk);
  EXPECT_EQ(out[0].remaining, 4u);
  EXPECT_EQ(out[1].remaining, 0u);
  EXPECT_EQ(handler_.check_alls, 1);

  // b is over: nothing is charged; a had room and says so with its untouched balance.
  EXPECT_EQ(run({desc({{"a", "x"}}), desc({{"b", "y"}})}), Code::kOverLimit);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].code, Code::kOk);
  EXPECT_EQ(out[0].remaining, 4u);
  EXPECT_EQ(out[0].limit, limit_of("a"));
  EXPECT_EQ(out[0].until_full_ns, 200 * kMs);
  EXPECT_EQ(out[0].retry_after_ns, 0);
  EXPECT_EQ(out[1].code, Code::kOverLimit);
  EXPECT_EQ(out[1].remaining, 0u);
  EXPECT_EQ(out[1].limit, limit_of("b"));
  EXPECT_EQ(out[1].retry_after_ns, 1 * kSec);
  EXPECT_EQ(out[1].until_full_ns, 1 * kSec);

  // a was not charged by the denied request.
  EXPECT_EQ(run({desc({{"a", "x"}})}), Code::kOk);
  EXPECT_EQ(out[0].remaining, 3u);
}

TEST_F(RlsDecide, TheSameBucketTwiceInOneRequestAddsUp) {
  // 3 + 3 > 5: the second is over, and neither is charged.
  EXPECT_EQ(run({desc({{"a", "x"}}, 3), desc({{"a", "x"}}, 3)}), Code::kOverLimit);
  EXPECT_EQ(out[0].code, Code::kOk);
  EXPECT_EQ(out[0].remaining, 5u);
  EXPECT_EQ(out[1].code, Code::kOverLimit);
  EXPECT_EQ(out[1].retry_after_ns, 200 * kMs);  // the one token short, at 5/s
  EXPECT_EQ(remaining("a", "x"), 5u);
  EXPECT_EQ(run({desc({{"a", "x"}}, 3), desc({{"a", "x"}}, 2)}), Code::kOk);
  EXPECT_EQ(out[0].remaining, 2u);
  EXPECT_EQ(out[1].remaining, 0u);
}

TEST_F(RlsDecide, StatusesFollowRequestOrder) {
  EXPECT_EQ(run({desc({{"nomatch", "1"}}), desc({{"free", "1"}}), desc({{"m", "1"}}), desc({{"a", "1"}}, 2)}),
            Code::kOk);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].limit, nullptr);
  EXPECT_EQ(out[0].remaining, 0u);
  EXPECT_EQ(out[1].remaining, kUnlimitedRemaining);
  EXPECT_EQ(out[2].limit, limit_of("m"));
  EXPECT_EQ(out[2].remaining, 19u);
  EXPECT_EQ(out[3].limit, limit_of("a"));
  EXPECT_EQ(out[3].remaining, 3u);
}

// --- hits_addend -------------------------------------------------------------------------------

TEST_F(RlsDecide, RequestHitsZeroMeansOne) {
  EXPECT_EQ(run({desc({{"a", "x"}})}, 0), Code::kOk);
  EXPECT_EQ(out[0].remaining, 4u);
  EXPECT_EQ(run({desc({{"a", "y"}})}, 3), Code::kOk);
  EXPECT_EQ(out[0].remaining, 2u);
  EXPECT_EQ(run({desc({{"a", "z"}})}, 6), Code::kOverLimit);  // above burst
  EXPECT_EQ(out[0].retry_after_ns, kRetryNever);
}

TEST_F(RlsDecide, DescriptorHitsOverrideTheRequestsAndZeroOnlyChecks) {
  // The descriptor's own 1 wins over the request's 3; the other descriptor takes the request's.
  EXPECT_EQ(run({desc({{"a", "own"}}, 1), desc({{"a", "req"}})}, 3), Code::kOk);
  EXPECT_EQ(out[0].remaining, 4u);
  EXPECT_EQ(out[1].remaining, 2u);
  // A descriptor's 0 is not "1": it checks without charging, whatever the request says.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(run({desc({{"a", "own"}}, 0)}, 4), Code::kOk);
    EXPECT_EQ(out[0].code, Code::kOk);
    EXPECT_EQ(out[0].remaining, 4u);
    EXPECT_EQ(out[0].limit, limit_of("a"));
    EXPECT_EQ(out[0].until_full_ns, 200 * kMs);
  }
  // A descriptor's own cost may be larger than the request's.
  EXPECT_EQ(run({desc({{"a", "own"}}, 4)}, 1), Code::kOk);
  EXPECT_EQ(out[0].remaining, 0u);
  EXPECT_EQ(out[0].until_full_ns, 1 * kSec);
}

// A descriptor whose own hits_addend is 0 "checks without charging" (docs/operations.md 10.3); on
// a bucket that is exactly used up the reference server computes count + 0 > limit: false, so OK
// with remaining 0, as for hits 0 on requests_per_unit 0. It must not fail the request, nor keep
// the other descriptors from being charged (in check_all, cost 0 would ask whether 1 token
// passes: TokenBucket::try_acquire).
TEST_F(RlsDecide, CheckOnlyDescriptorOnAUsedUpBucketDoesNotDeny) {
  EXPECT_EQ(run({desc({{"b", "y"}})}), Code::kOk);  // b used up: 0 left
  EXPECT_EQ(run({desc({{"b", "y"}}, 0), desc({{"a", "x"}})}), Code::kOk);
  EXPECT_EQ(out[0].code, Code::kOk);
  EXPECT_EQ(out[0].remaining, 0u);
  EXPECT_EQ(out[1].code, Code::kOk);
  EXPECT_EQ(out[1].remaining, 4u);
}

// --- no limit, unlimited, requests_per_unit 0 --------------------------------------------------

TEST_F(RlsDecide, NoLimitIsOkWithNothingLeftAndNoLimit) {
  for (const std::vector<DescriptorInput>& request : std::vector<std::vector<DescriptorInput>>{
           {desc({{"nomatch", "x"}})},
           {desc({{"placeholder", "x"}})},         // a node without rate_limit
           {desc({{"a", "x"}, {"deeper", "y"}})},  // longer than the tree
           {desc({})},                             // no entries: matches nothing
       }) {
    EXPECT_EQ(run(request, 1000), Code::kOk);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].code, Code::kOk);
    EXPECT_EQ(out[0].limit, nullptr);
    EXPECT_EQ(out[0].remaining, 0u);
    EXPECT_EQ(out[0].until_full_ns, -1);
    EXPECT_EQ(out[0].retry_after_ns, 0);
    EXPECT_FALSE(out[0].shadow_over);
  }
  EXPECT_EQ(run({desc({{"a", "x"}})}, 1000, "unknown-domain"), Code::kOk);
  EXPECT_EQ(out[0].limit, nullptr);
  EXPECT_EQ(out[0].remaining, 0u);
  EXPECT_EQ(handler_.checks + handler_.check_alls, 0);  // nothing to ask the table

  // No config at all: every descriptor has no limit.
  Plan plan;
  EXPECT_EQ(plan_request(nullptr, "d", 0, {desc({{"a", "x"}})}, 256, plan), "");
  EXPECT_EQ(decide(handler_, plan, out), Code::kOk);
  EXPECT_EQ(out[0].limit, nullptr);
  EXPECT_EQ(out[0].remaining, 0u);
}

TEST_F(RlsDecide, UnlimitedIsOkWithTheLargestRemainingAndIsNeverCounted) {
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(run({desc({{"free", "x"}})}, 1000000), Code::kOk);
    EXPECT_EQ(out[0].code, Code::kOk);
    EXPECT_EQ(out[0].remaining, kUnlimitedRemaining);
    EXPECT_EQ(out[0].limit, nullptr);
    EXPECT_EQ(out[0].until_full_ns, -1);
  }
  EXPECT_EQ(handler_.table().size(), 0u);
}

TEST_F(RlsDecide, RequestsPerUnitZeroDeniesAnyCostAndChargesNothingElse) {
  EXPECT_EQ(run({desc({{"block", "x"}})}), Code::kOverLimit);
  EXPECT_EQ(out[0].code, Code::kOverLimit);
  EXPECT_EQ(out[0].limit, limit_of("block"));
  EXPECT_EQ(out[0].remaining, 0u);
  EXPECT_EQ(out[0].retry_after_ns, kRetryNever);
  EXPECT_EQ(out[0].until_full_ns, -1);

  // With another descriptor that has room: it is not charged and reports its balance.
  EXPECT_EQ(run({desc({{"a", "r"}}), desc({{"block", "x"}})}), Code::kOverLimit);
  EXPECT_EQ(out[0].code, Code::kOk);
  EXPECT_EQ(out[0].remaining, 5u);
  EXPECT_EQ(out[0].limit, limit_of("a"));
  EXPECT_EQ(out[1].code, Code::kOverLimit);
  EXPECT_EQ(remaining("a", "r"), 5u);

  // Cost 0: OK, and the rest of the request goes ahead.
  EXPECT_EQ(run({desc({{"block", "x"}}, 0), desc({{"a", "s"}})}), Code::kOk);
  EXPECT_EQ(out[0].code, Code::kOk);
  EXPECT_EQ(out[0].limit, limit_of("block"));
  EXPECT_EQ(out[0].remaining, 0u);
  EXPECT_EQ(out[1].remaining, 4u);
}

// When a requests_per_unit-0 descriptor has already blocked the request, the others are looked
// at without charging, and judged against their own cost. A descriptor that itself has no room must answer OVER_LIMIT
// with its retry_after, as it does when the request is denied by an ordinary bucket (first half, passes); behind a
// requests_per_unit-0 descriptor it answers OK with remaining 1 (second half).
TEST_F(RlsDecide, ADescriptorWithoutRoomIsOverWhateverElseDeniedTheRequest) {
  EXPECT_EQ(run({desc({{"a", "t"}}, 4)}), Code::kOk);  // 1 left
  EXPECT_EQ(run({desc({{"b", "u"}})}), Code::kOk);     // 0 left

  // Denied by a used-up bucket: a (3 > 1) is over in its own right.
  EXPECT_EQ(run({desc({{"a", "t"}}), desc({{"b", "u"}})}, 3), Code::kOverLimit);
  EXPECT_EQ(out[0].code, Code::kOverLimit);
  EXPECT_EQ(out[0].retry_after_ns, 400 * kMs);  // 2 tokens short at 5/s
  EXPECT_EQ(out[1].code, Code::kOverLimit);

  // Denied by requests_per_unit 0: a is just as over.
  EXPECT_EQ(run({desc({{"a", "t"}}), desc({{"block", "v"}})}, 3), Code::kOverLimit);
  EXPECT_EQ(out[0].code, Code::kOverLimit);
  EXPECT_EQ(out[0].remaining, 0u);
  EXPECT_EQ(out[0].retry_after_ns, 400 * kMs);
  EXPECT_EQ(out[1].code, Code::kOverLimit);
  EXPECT_EQ(remaining("a", "t"), 1u);
}

// --- shadow mode -------------------------------------------------------------------------------

TEST_F(RlsDecide, ShadowNeverDeniesAndTellsWhenItWouldHave) {
  EXPECT_EQ(run({desc({{"shadow", "s"}})}), Code::kOk);
  EXPECT_EQ(out[0].code, Code::kOk);
  EXPECT_EQ(out[0].remaining, 1u);
  EXPECT_EQ(out[0].limit, limit_of("shadow"));
  EXPECT_FALSE(out[0].shadow_over);
  EXPECT_EQ(out[0].until_full_ns, 500 * kMs);
  EXPECT_EQ(run({desc({{"shadow", "s"}})}), Code::kOk);
  EXPECT_EQ(out[0].remaining, 0u);
  EXPECT_FALSE(out[0].shadow_over);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(run({desc({{"shadow", "s"}})}), Code::kOk) << i;
    EXPECT_EQ(out[0].code, Code::kOk);
    EXPECT_TRUE(out[0].shadow_over);
    EXPECT_EQ(out[0].remaining, 0u);
    EXPECT_EQ(out[0].limit, limit_of("shadow"));
    EXPECT_EQ(out[0].until_full_ns, 1 * kSec);
  }
  // Over its limit, it does not block the others, which are charged.
  EXPECT_EQ(run({desc({{"shadow", "s"}}), desc({{"a", "q"}})}), Code::kOk);
  EXPECT_TRUE(out[0].shadow_over);
  EXPECT_EQ(out[0].code, Code::kOk);
  EXPECT_EQ(out[1].code, Code::kOk);
  EXPECT_EQ(out[1].remaining, 4u);
  EXPECT_EQ(remaining("a", "q"), 4u);
}

TEST_F(RlsDecide, ShadowIsChargedOnlyWhenTheRequestGoesAhead) {
  // Denied by requests_per_unit 0.
  EXPECT_EQ(run({desc({{"shadow", "t"}}), desc({{"block", "x"}})}), Code::kOverLimit);
  EXPECT_EQ(out[0].code, Code::kOk);
  EXPECT_FALSE(out[0].shadow_over);
  EXPECT_EQ(out[0].remaining, 2u);
  EXPECT_EQ(remaining("shadow", "t"), 2u);
  // Denied by a used-up bucket.
  EXPECT_EQ(run({desc({{"b", "y"}})}), Code::kOk);
  EXPECT_EQ(run({desc({{"shadow", "t"}}), desc({{"b", "y"}})}), Code::kOverLimit);
  EXPECT_EQ(out[0].code, Code::kOk);
  EXPECT_EQ(out[0].remaining, 2u);
  EXPECT_EQ(remaining("shadow", "t"), 2u);
  // Allowed: charged.
  EXPECT_EQ(run({desc({{"shadow", "t"}}), desc({{"a", "y"}})}), Code::kOk);
  EXPECT_EQ(out[0].remaining, 1u);
  EXPECT_EQ(remaining("shadow", "t"), 1u);

  // A used-up shadow descriptor in a denied request: it would have denied too.
  EXPECT_EQ(run({desc({{"shadow", "t"}})}), Code::kOk);
  EXPECT_EQ(run({desc({{"shadow", "t"}}), desc({{"block", "x"}})}), Code::kOverLimit);
  EXPECT_EQ(out[0].code, Code::kOk);
  EXPECT_TRUE(out[0].shadow_over);
  EXPECT_EQ(out[0].remaining, 0u);
}

TEST_F(RlsDecide, ShadowWithRequestsPerUnitZero) {
  EXPECT_EQ(run({desc({{"shadowblock", "x"}}), desc({{"a", "x"}})}), Code::kOk);
  EXPECT_EQ(out[0].code, Code::kOk);
  EXPECT_TRUE(out[0].shadow_over);
  EXPECT_EQ(out[0].limit, limit_of("shadowblock"));
  EXPECT_EQ(out[0].remaining, 0u);
  EXPECT_EQ(out[1].remaining, 4u);
  EXPECT_EQ(run({desc({{"shadowblock", "x"}}, 0)}), Code::kOk);
  EXPECT_FALSE(out[0].shadow_over);
}

// --- replaces ----------------------------------------------------------------------------------

TEST_F(RlsDecide, AReplacedLimitAnswersAsNoLimit) {
  EXPECT_EQ(run({desc({{"user", "a"}}), desc({{"vip", "b"}})}), Code::kOk);
  EXPECT_EQ(out[0].limit, nullptr);
  EXPECT_EQ(out[0].remaining, 0u);
  EXPECT_EQ(out[0].until_full_ns, -1);
  EXPECT_EQ(out[1].limit, limit_of("vip"));
  EXPECT_EQ(out[1].remaining, 49u);
  // Not charged while replaced.
  EXPECT_EQ(remaining("user", "a"), 5u);
  // Alone, it applies.
  EXPECT_EQ(run({desc({{"user", "a"}})}), Code::kOk);
  EXPECT_EQ(out[0].limit, limit_of("user"));
  EXPECT_EQ(out[0].remaining, 4u);
}

// --- plan_request ------------------------------------------------------------------------------

TEST_F(RlsDecide, PlanRejectsMalformedRequests) {
  Plan plan;
  const std::vector<DescriptorInput> one{desc({{"a", "x"}})};
  EXPECT_EQ(plan_request(config_, "", 0, one, 256, plan), "domain must not be empty");
  EXPECT_EQ(plan_request(config_, "d", 0, {}, 256, plan), "the request has no descriptors");

  std::vector<DescriptorInput> many(kMaxDescriptors, desc({{"a", "x"}}));
  EXPECT_EQ(plan_request(config_, "d", 0, many, 256, plan), "");
  EXPECT_EQ(plan.descriptors.size(), 64u);
  many.push_back(desc({{"a", "x"}}));
  EXPECT_EQ(plan_request(config_, "d", 0, many, 256, plan), "the request has 65 descriptors; at most 64 are accepted");

  DescriptorInput wide;
  for (size_t i = 0; i < kMaxEntries; ++i) wide.entries.push_back({"k", "v"});
  EXPECT_EQ(plan_request(config_, "d", 0, {desc({{"a", "x"}}), wide}, 256, plan), "");
  wide.entries.push_back({"k", "v"});
  EXPECT_EQ(plan_request(config_, "d", 0, {desc({{"a", "x"}}), wide}, 256, plan),
            "descriptor 1 has 33 entries; at most 32 are accepted");

  EXPECT_EQ(plan_request(config_, "d", 0, {desc({{"a", "x"}, {"", "y"}})}, 256, plan),
            "descriptor 0 entry 1 has an empty key");
  EXPECT_EQ(plan_request(config_, "d", 0, {desc({{"a", ""}})}, 256, plan), "");  // an empty value is fine

  EXPECT_EQ(plan_request(config_, "d", 0, {desc({{"a", "x"}}, uint64_t(kMaxTokens))}, 256, plan), "");
  EXPECT_EQ(plan_request(config_, "d", 0, {desc({{"a", "x"}}, uint64_t(kMaxTokens) + 1)}, 256, plan),
            "descriptor 0 hits_addend 1000000000001 exceeds 1000000000000");
  EXPECT_EQ(plan_request(config_, "d", 0, {desc({{"a", "x"}}), desc({{"a", "x"}}, UINT64_MAX)}, 256, plan),
            "descriptor 1 hits_addend 18446744073709551615 exceeds 1000000000000");
  // The request-level hits_addend is a uint32: always in range.
  EXPECT_EQ(plan_request(config_, "d", UINT32_MAX, one, 256, plan), "");
  ASSERT_EQ(plan.descriptors.size(), 1u);
  EXPECT_EQ(plan.descriptors[0].hits, int64_t(UINT32_MAX));
}

TEST_F(RlsDecide, PlanCarriesHitsMatchesAndTheConfig) {
  Plan plan;
  EXPECT_EQ(plan_request(config_, "d", 0, {desc({{"a", "x"}}), desc({{"m", "y"}}, 7), desc({{"nomatch", "z"}}, 0)}, 256,
                         plan),
            "");
  EXPECT_EQ(plan.config, config_);
  ASSERT_EQ(plan.descriptors.size(), 3u);
  EXPECT_EQ(plan.descriptors[0].hits, 1);
  EXPECT_EQ(plan.descriptors[0].match.limit, limit_of("a"));
  EXPECT_EQ(plan.descriptors[0].match.key, std::string("\x1e"
                                                       "d\x1f"
                                                       "a\x1d"
                                                       "1:x"));
  EXPECT_EQ(plan.descriptors[1].hits, 7);
  EXPECT_EQ(plan.descriptors[1].match.limit, limit_of("m"));
  EXPECT_EQ(plan.descriptors[2].hits, 0);
  EXPECT_EQ(plan.descriptors[2].match.limit, nullptr);
  // A second plan into the same object starts afresh.
  EXPECT_EQ(plan_request(config_, "d", 2, {desc({{"b", "x"}})}, 256, plan), "");
  ASSERT_EQ(plan.descriptors.size(), 1u);
  EXPECT_EQ(plan.descriptors[0].hits, 2);
  EXPECT_EQ(plan.descriptors[0].match.limit, limit_of("b"));
}

TEST_F(RlsDecide, OverLongKeysAreShortenedDistinctlyAndStillFindTheirLimit) {
  const std::string path(
      "\x1e"
      "d\x1f"
      "a\x1d",
      5);
  const std::string x(4000, 'x'), x2(4000, 'x'), y(4000, 'y');
  std::string x_end = x;
  x_end.back() = 'z';
  Plan plan;
  ASSERT_EQ(plan_request(
                config_, "d", 0,
                {desc({{"a", x}}), desc({{"a", x2}}), desc({{"a", y}}), desc({{"a", x_end}}), desc({{"a", "short"}})},
                256, plan),
            "");
  const std::string& kx = plan.descriptors[0].match.key;
  const std::string& kx2 = plan.descriptors[1].match.key;
  const std::string& ky = plan.descriptors[2].match.key;
  const std::string& kz = plan.descriptors[3].match.key;
  for (const std::string* k : {&kx, &kx2, &ky, &kz}) {
    EXPECT_LE(k->size(), 256u);
    EXPECT_EQ(k->size(), path.size() + 33);  // "#" and 32 hex digits
    EXPECT_EQ(k->substr(0, path.size()), path);
    EXPECT_EQ((*k)[path.size()], '#');
    ASSERT_TRUE(config_->limit_index(*k).has_value());
    EXPECT_EQ(&config_->limit(*config_->limit_index(*k)), limit_of("a"));
  }
  EXPECT_EQ(kx, kx2);  // equal values, equal keys
  EXPECT_NE(kx, ky);
  EXPECT_NE(kx, kz);  // differing only in the last byte
  EXPECT_NE(ky, kz);
  EXPECT_EQ(plan.descriptors[4].match.key, path + "5:short");
  EXPECT_EQ(plan.descriptors[0].match.path_bytes, path.size());

  // The boundary: a key of exactly max_key_bytes is kept as it is, one more byte is shortened.
  const std::string fits(256 - path.size() - 4, 'f');  // "247:" + 247 bytes
  const std::string over(fits.size() + 1, 'f');
  ASSERT_EQ(plan_request(config_, "d", 0, {desc({{"a", fits}}), desc({{"a", over}})}, 256, plan), "");
  EXPECT_EQ(plan.descriptors[0].match.key, path + "247:" + fits);
  EXPECT_EQ(plan.descriptors[0].match.key.size(), 256u);
  EXPECT_EQ(plan.descriptors[1].match.key.size(), path.size() + 33);

  // And they are decided like any other key: one bucket per distinct value.
  EXPECT_EQ(run({desc({{"a", x}})}), Code::kOk);
  EXPECT_EQ(out[0].remaining, 4u);
  EXPECT_EQ(run({desc({{"a", x2}})}), Code::kOk);
  EXPECT_EQ(out[0].remaining, 3u);
  EXPECT_EQ(run({desc({{"a", y}})}), Code::kOk);
  EXPECT_EQ(out[0].remaining, 4u);
  EXPECT_EQ(handler_.table().stats().rejected_keys, 0u);
}

// --- charge_when_over (Envoy's apply_on_stream_done: the cost is known after the work) ----------

// The flow of Envoy's apply_on_stream_done: before the work, a check that costs nothing (denied
// while the bucket is in debt); after it, the real cost, paid whatever the answer.
TEST_F(RlsDecide, ChargeWhenOverPaysTheCostIntoDebtAndLaterCallsWaitUntilRepaid) {
  EXPECT_EQ(run({desc({{"llm", "u"}}, 0)}), Code::kOk);
  EXPECT_EQ(run({desc({{"llm", "u"}}, 25)}), Code::kOverLimit);  // 25 tokens of an answer, 10 there
  EXPECT_EQ(out[0].code, Code::kOverLimit);
  EXPECT_EQ(out[0].remaining, 0u);
  EXPECT_EQ(out[0].until_full_ns, 2500 * kMs);                  // from -15 to 10 at 10/s
  EXPECT_EQ(run({desc({{"llm", "u"}}, 0)}), Code::kOverLimit);  // in debt: the next request waits
  EXPECT_EQ(out[0].retry_after_ns, 1500 * kMs);                 // until the debt is repaid
  handler_.now += kSec;                                         // -5
  EXPECT_EQ(run({desc({{"llm", "u"}}, 0)}), Code::kOverLimit);
  handler_.now += 500 * kMs;  // 0: repaid
  EXPECT_EQ(run({desc({{"llm", "u"}}, 0)}), Code::kOk);
  EXPECT_EQ(out[0].remaining, 0u);
}

// A check that costs nothing answers as the reference server's count + 0 > limit does: over only
// while the bucket is in debt, and then nothing else in the request is charged.
TEST_F(RlsDecide, ACheckThatCostsNothingDeniesWhileInDebt) {
  EXPECT_EQ(run({desc({{"llm", "w"}}, 15)}), Code::kOverLimit);  // -5
  EXPECT_EQ(run({desc({{"llm", "w"}}, 0), desc({{"a", "x"}})}), Code::kOverLimit);
  EXPECT_EQ(out[0].code, Code::kOverLimit);
  EXPECT_EQ(out[1].code, Code::kOk);
  EXPECT_EQ(remaining("a", "x"), 5u) << "a was not charged";
}

TEST_F(RlsDecide, ChargeWhenOverIsPaidEvenWhenAnotherDescriptorDenies) {
  EXPECT_EQ(run({desc({{"b", "y"}})}), Code::kOk);  // b used up
  EXPECT_EQ(run({desc({{"llm", "v"}}, 4), desc({{"b", "y"}})}), Code::kOverLimit);
  EXPECT_EQ(out[0].code, Code::kOk);  // it had room; the cost is paid all the same
  EXPECT_EQ(out[0].remaining, 6u);
  EXPECT_EQ(remaining("llm", "v"), 6u);
  // Behind a requests_per_unit-0 descriptor too.
  EXPECT_EQ(run({desc({{"llm", "v"}}, 4), desc({{"block", "z"}})}), Code::kOverLimit);
  EXPECT_EQ(remaining("llm", "v"), 2u);
}

// --- refunds (is_negative_hits) ---------------------------------------------------------------

TEST_F(RlsDecide, ARefundGivesTheHitsBackNeverAboveTheLimit) {
  EXPECT_EQ(run({desc({{"m", "r"}}, 15)}), Code::kOk);
  EXPECT_EQ(out[0].remaining, 5u);
  EXPECT_EQ(run({refund({{"m", "r"}}, 10)}), Code::kOk);
  EXPECT_EQ(out[0].code, Code::kOk);
  EXPECT_EQ(out[0].limit, limit_of("m"));
  EXPECT_EQ(out[0].remaining, 15u);
  EXPECT_EQ(handler_.refunds, 1);
  EXPECT_EQ(run({refund({{"m", "r"}}, 1000)}), Code::kOk);  // more than was spent: full, no more
  EXPECT_EQ(out[0].remaining, 20u);
  EXPECT_EQ(remaining("m", "r"), 20u);
}

TEST_F(RlsDecide, ARefundAnswersOkWhateverTheRequestsChecksAnswerAndAfterThem) {
  // b (1/s) is spent: the request is over, and the refund of a's bucket happens all the same.
  EXPECT_EQ(run({desc({{"a", "r"}}, 5)}), Code::kOk);
  EXPECT_EQ(run({desc({{"b", "r"}})}), Code::kOk);
  EXPECT_EQ(run({desc({{"b", "r"}}), refund({{"a", "r"}}, 2)}), Code::kOverLimit);
  EXPECT_EQ(out[0].code, Code::kOverLimit);
  EXPECT_EQ(out[1].code, Code::kOk);
  EXPECT_EQ(out[1].remaining, 2u);
  // A check of the same bucket in the request is decided before the refund: it cannot spend it.
  EXPECT_EQ(run({desc({{"a", "r"}}, 3), refund({{"a", "r"}}, 3)}), Code::kOverLimit);
  EXPECT_EQ(out[1].remaining, 5u);
}

TEST_F(RlsDecide, ARefundWithoutABucketChangesNothing) {
  EXPECT_EQ(run({refund({{"free", "x"}}, 5), refund({{"nowhere", "x"}}, 5), refund({{"block", "x"}}, 5)}), Code::kOk);
  EXPECT_EQ(out[0].remaining, std::numeric_limits<uint32_t>::max());  // unlimited
  EXPECT_EQ(out[1].limit, nullptr);                                   // no limit
  EXPECT_EQ(out[2].code, Code::kOk);                                  // a refund never blocks
  EXPECT_EQ(handler_.refunds, 0);
}

// --- the global shadow mode (--rls-shadow-mode) ------------------------------------------------

TEST(RlsDecideShadowAll, EveryDescriptorIsCountedAndNoneDenies) {
  const auto config = parse_rls_config({{"rls.yaml", kConfig}}, {.merge_domains = false, .shadow_mode = true});
  ASSERT_TRUE(config->shadow_all());
  TableHandler handler(config);
  std::vector<DescriptorResult> out;
  auto run = [&](const std::vector<DescriptorInput>& descriptors) {
    Plan plan;
    EXPECT_EQ(plan_request(config, "d", 0, descriptors, 256, plan), "");
    return decide(handler, plan, out);
  };
  EXPECT_EQ(run({desc({{"b", "x"}})}), Code::kOk);  // b: 1/s
  EXPECT_FALSE(out[0].shadow_over);
  EXPECT_EQ(run({desc({{"b", "x"}})}), Code::kOk);  // would be over: OK, and said so
  EXPECT_TRUE(out[0].shadow_over);
  EXPECT_EQ(run({desc({{"block", "x"}})}), Code::kOk);  // requests_per_unit 0 too
  // A limit override is in shadow mode as well.
  DescriptorInput o = desc({{"b", "y"}});
  o.limit = RlsLimitOverride{1, RlsUnit::kHour, 1};
  EXPECT_EQ(run({o}), Code::kOk);
  EXPECT_EQ(run({o}), Code::kOk);
  EXPECT_TRUE(out[0].shadow_over);
}

// --- quota mode (a descriptor's quota_mode; --rls-quota-mode) -----------------------------------
// The reference server's cases (its service tests), on real buckets: "regular" is 1/s, "quota"
// and "quota2" 1/s in quota mode. Each case first spends what it needs over.

const char* const kQuotaConfig = R"(domain: d
descriptors:
  - key: regular
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: quota2
    quota_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: quotablock
    quota_mode: true
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: quotacharged
    quota_mode: true
    rate_limit: {unit: second, requests_per_unit: 1, max_debt: 5, charge_when_over: true}
)";

class RlsDecideQuota : public ::testing::Test {
 protected:
  explicit RlsDecideQuota(RlsLoadOptions options = {})
      : config_(parse_rls_config({{"rls.yaml", kQuotaConfig}}, options)), handler_(config_) {}
  Code run(const std::vector<DescriptorInput>& descriptors) {
    Plan plan;
    EXPECT_EQ(plan_request(config_, "d", 0, descriptors, 256, plan), "");
    return decide(handler_, plan, out);
  }
  // Spends (key=value)'s one token.
  void spend(std::string_view key, std::string_view value) {
    ASSERT_EQ(run({desc({{key, value}})}), Code::kOk) << key << " was already spent";
  }
  std::shared_ptr<const RlsConfig> config_;
  TableHandler handler_;
  std::vector<DescriptorResult> out;
};

TEST_F(RlsDecideQuota, ARegularDescriptorOverDeniesWhateverTheQuotaSays) {
  spend("regular", "x");
  EXPECT_EQ(run({desc({{"regular", "x"}}), desc({{"quota", "x"}})}), Code::kOverLimit);
  EXPECT_EQ(out[0].code, Code::kOverLimit);
  EXPECT_EQ(out[1].code, Code::kOk);
  EXPECT_EQ(out[1].remaining, 1u) << "the quota with room was not charged by a denied request";
}

TEST_F(RlsDecideQuota, OneQuotaOverAloneDeniesItsRequest) {
  spend("quota", "x");
  EXPECT_EQ(run({desc({{"regular", "x"}}), desc({{"quota", "x"}})}), Code::kOverLimit)
      << "every quota descriptor of the request is over";
  EXPECT_EQ(out[0].code, Code::kOk);
  EXPECT_EQ(out[0].remaining, 1u) << "not charged: the request was denied";
  EXPECT_EQ(out[1].code, Code::kOverLimit);
}

TEST_F(RlsDecideQuota, NothingOverIsOkAndChargesEveryone) {
  EXPECT_EQ(run({desc({{"regular", "x"}}), desc({{"quota", "x"}})}), Code::kOk);
  EXPECT_EQ(out[0].remaining, 0u);
  EXPECT_EQ(out[1].remaining, 0u);
}

TEST_F(RlsDecideQuota, AllQuotasOverDeny) {
  spend("quota", "x");
  spend("quota2", "x");
  EXPECT_EQ(run({desc({{"quota", "x"}}), desc({{"quota2", "x"}})}), Code::kOverLimit);
  EXPECT_EQ(out[0].code, Code::kOverLimit);
  EXPECT_EQ(out[1].code, Code::kOverLimit);
}

TEST_F(RlsDecideQuota, SomeQuotasOverAnswerOkAndOnlyThoseWithRoomAreCharged) {
  spend("quota", "x");
  EXPECT_EQ(run({desc({{"quota", "x"}}), desc({{"quota2", "x"}}), desc({{"regular", "x"}})}), Code::kOk);
  EXPECT_EQ(out[0].code, Code::kOverLimit) << "its own status still says it is over, as the reference's";
  EXPECT_GT(out[0].retry_after_ns, 0);
  EXPECT_EQ(out[1].code, Code::kOk);
  EXPECT_EQ(out[1].remaining, 0u) << "charged";
  EXPECT_EQ(out[2].code, Code::kOk);
  EXPECT_EQ(out[2].remaining, 0u) << "charged";
  // The one over was not charged: a second later it holds a whole token again.
  handler_.now += kSec;
  EXPECT_EQ(run({desc({{"quota", "x"}})}), Code::kOk);
}

TEST_F(RlsDecideQuota, ABlockingQuotaIsOverButDoesNotDenyAlone) {
  EXPECT_EQ(run({desc({{"quotablock", "x"}}), desc({{"quota", "x"}})}), Code::kOk);
  EXPECT_EQ(out[0].code, Code::kOverLimit);
  EXPECT_EQ(run({desc({{"quotablock", "x"}})}), Code::kOverLimit) << "the only quota descriptor";
  // Costing nothing it has room, and no bucket: nothing is checked for it, and it keeps its limit.
  const int calls = handler_.calls;
  EXPECT_EQ(run({desc({{"quotablock", "x"}}, 0)}), Code::kOk);
  EXPECT_EQ(out[0].code, Code::kOk);
  EXPECT_NE(out[0].limit, nullptr) << "its status still names its limit";
  EXPECT_EQ(handler_.calls, calls) << "no check of a bucket it does not have";
}

TEST_F(RlsDecideQuota, AQuotaOverThatChargesWhenOverIsPaidAllTheSame) {
  spend("quotacharged", "x");
  EXPECT_EQ(run({desc({{"quotacharged", "x"}}), desc({{"quota", "x"}})}), Code::kOk);
  EXPECT_EQ(out[0].code, Code::kOverLimit);
  EXPECT_EQ(run({desc({{"quotacharged", "x"}}, 0)}), Code::kOverLimit) << "charged while over: in debt";
  EXPECT_EQ(run({desc({{"quota", "y"}}, 0)}), Code::kOk) << "a quota with nothing spent is not in debt";
}

// The same quota key twice in one request, with room for one: the reference counts two hits,
// the first OK and the second over, and the request passes (not every quota is over). Here the
// second fails the all-or-nothing check, is answered over and left out, and the rest retried.
TEST_F(RlsDecideQuota, AQuotaKeyTwiceWithRoomForOneLeavesOneOver) {
  EXPECT_EQ(run({desc({{"quota", "x"}}), desc({{"quota", "x"}}), desc({{"regular", "x"}})}), Code::kOk);
  const int over = (out[0].code == Code::kOverLimit) + (out[1].code == Code::kOverLimit);
  EXPECT_EQ(over, 1);
  EXPECT_EQ(out[2].code, Code::kOk);
  handler_.now += kSec;  // one token back: enough only if the retry charged regular once
  EXPECT_EQ(run({desc({{"regular", "x"}})}), Code::kOk);
}

class RlsDecideQuotaAll : public RlsDecideQuota {
 protected:
  RlsDecideQuotaAll() : RlsDecideQuota({.merge_domains = false, .shadow_mode = false, .quota_mode = true}) {}
};

TEST_F(RlsDecideQuotaAll, EveryDescriptorIsAQuota) {
  ASSERT_TRUE(config_->quota_all());
  spend("regular", "x");
  EXPECT_EQ(run({desc({{"regular", "x"}}), desc({{"regular", "y"}})}), Code::kOk) << "one of two over";
  EXPECT_EQ(out[0].code, Code::kOverLimit);
  EXPECT_EQ(run({desc({{"regular", "x"}}), desc({{"regular", "y"}})}), Code::kOverLimit) << "both over";
  // A limit override is in quota mode as well.
  DescriptorInput o = desc({{"regular", "z"}});
  o.limit = RlsLimitOverride{1, RlsUnit::kHour, 1};
  EXPECT_EQ(run({o, desc({{"quota", "z"}})}), Code::kOk);
  EXPECT_EQ(run({o, desc({{"quota2", "z"}})}), Code::kOk) << "the override is over, quota2 has room";
  EXPECT_EQ(out[0].code, Code::kOverLimit);
}

// --- several limits on one descriptor (rate_limits) -------------------------------------------

TEST(RlsDecideSeveralLimits, AllOrNothingAcrossTheLimitsAndTheStatusNamesTheOneOver) {
  const auto config = parse_rls_config({{"rls.yaml", R"(domain: d
descriptors:
  - key: api
    rate_limits:
      - {unit: second, requests_per_unit: 3, name: per_second}
      - {unit: hour, requests_per_unit: 4, name: per_hour}
  - key: other
    rate_limit: {unit: second, requests_per_unit: 100}
)"}});
  TableHandler handler(config);
  std::vector<DescriptorResult> out;
  auto run = [&](const std::vector<DescriptorInput>& descriptors) {
    Plan plan;
    EXPECT_EQ(plan_request(config, "d", 0, descriptors, 256, plan), "");
    return decide(handler, plan, out);
  };
  EXPECT_EQ(run({desc({{"api", "k"}})}), Code::kOk);
  ASSERT_EQ(out.size(), 1u) << "one status per request descriptor";
  EXPECT_EQ(out[0].limit->name, "per_second") << "the one with the fewest left: 2 of 3 against 3 of 4";
  EXPECT_EQ(out[0].remaining, 2u);
  EXPECT_EQ(run({desc({{"api", "k"}}, 2), desc({{"other", "o"}})}), Code::kOk);  // 0 of 3 and 1 of 4 left
  EXPECT_EQ(out[0].remaining, 0u);
  handler.now += kSec;  // the second's limit is full again, the hour's is not: 1 left
  EXPECT_EQ(run({desc({{"api", "k"}}, 2), desc({{"other", "o"}})}), Code::kOverLimit);
  EXPECT_EQ(out[0].code, Code::kOverLimit);
  EXPECT_EQ(out[0].limit->name, "per_hour") << "the limit that denied";
  EXPECT_GT(out[0].retry_after_ns, 0);
  EXPECT_EQ(out[1].code, Code::kOk);
  EXPECT_EQ(out[1].remaining, 100u) << "the other descriptor (full again) was not charged by the denied call";
  // Nothing was charged to the second's limit either: it still holds 3, so 1 (the hour's last) passes.
  EXPECT_EQ(run({desc({{"api", "k"}})}), Code::kOk);
  EXPECT_EQ(out[0].limit->name, "per_hour");
  EXPECT_EQ(out[0].remaining, 0u);
  // A refund gives back to every limit of the descriptor.
  Plan plan;
  DescriptorInput back = desc({{"api", "k"}}, 1);
  back.is_negative_hits = true;
  ASSERT_EQ(plan_request(config, "d", 0, {back}, 256, plan), "");
  EXPECT_EQ(decide(handler, plan, out), Code::kOk);
  EXPECT_EQ(run({desc({{"api", "k"}})}), Code::kOk) << "the hour's token is back";
}

// --- per-value counts (detailed_metric, value_to_metric): ValueMetrics ------------------------

// --- concurrency (tollgate's `concurrency:`, issue 40) -------------------------------------------

const char* const kLeaseConfig = R"(domain: d
descriptors:
  - key: stream
    concurrency: 2
    lease_ttl: 30s
  - key: both
    concurrency: 1
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: rate
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: watch
    shadow_mode: true
    concurrency: 1
)";

class RlsDecideLeases : public RlsDecide {
 protected:
  RlsDecideLeases() : RlsDecide(kLeaseConfig) {}
  // Slots of (key=v) held now, as the node counts them.
  int64_t in_flight(std::string_view key) const {
    const RlsEntry e{key, "v"};
    const RlsMatch m = config_->match("d", {&e, 1});
    EXPECT_NE(m.concurrency, nullptr);
    return handler_.leases->in_flight(m.concurrency_key);
  }
  Code start(std::string_view key) { return run({desc({{key, "v"}}, 1)}); }
  Code done(std::string_view key) { return run({refund({{key, "v"}}, 1)}); }
};

// hits_addend takes slots, is_negative_hits (Envoy's stream-done call) frees them; a denied
// stream's done call frees nobody's slot.
TEST_F(RlsDecideLeases, StreamsTakeSlotsAndTheirEndFreesThemButADeniedStreamsEndFreesNone) {
  EXPECT_EQ(start("stream"), Code::kOk);  // A
  EXPECT_EQ(out[0].remaining, 1u);
  EXPECT_EQ(start("stream"), Code::kOk);  // B
  EXPECT_EQ(out[0].remaining, 0u);
  EXPECT_EQ(run({desc({{"stream", "v"}}, 0)}), Code::kOk) << "a look (hits 0) never denies";
  EXPECT_EQ(out[0].remaining, 0u);
  EXPECT_EQ(start("stream"), Code::kOverLimit);  // C
  EXPECT_TRUE(out[0].concurrency_over);
  EXPECT_EQ(out[0].concurrency_limit, 2);
  EXPECT_EQ(in_flight("stream"), 2);
  EXPECT_EQ(done("stream"), Code::kOk);  // C's end: settles what C owed
  EXPECT_EQ(in_flight("stream"), 2) << "the denied stream's end freed a slot it never had";
  EXPECT_EQ(done("stream"), Code::kOk);  // A's end
  EXPECT_EQ(in_flight("stream"), 1);
  EXPECT_EQ(start("stream"), Code::kOk);  // D
  EXPECT_EQ(done("stream"), Code::kOk);   // B's
  EXPECT_EQ(done("stream"), Code::kOk);   // D's
  EXPECT_EQ(in_flight("stream"), 0);
  const LeaseStats st = handler_.leases->stats();
  EXPECT_EQ(st.owed_settled, 1u);
  EXPECT_EQ(st.anonymous_released, 3u);
  EXPECT_EQ(st.anonymous_unmatched, 0u);
}

// All or nothing: a rate over gives back the lease its request took (and its end owes nothing
// real), a concurrency over charges no rate.
TEST_F(RlsDecideLeases, ARateOverKeepsNoLeaseAndAConcurrencyOverChargesNoRate) {
  EXPECT_EQ(run({desc({{"stream", "v"}}, 1), desc({{"rate", "v"}}, 1)}), Code::kOk);
  EXPECT_EQ(run({desc({{"stream", "v"}}, 1), desc({{"rate", "v"}}, 1)}), Code::kOverLimit);
  EXPECT_EQ(out[0].code, Code::kOk) << "the stream had room; the rate denied";
  EXPECT_EQ(out[1].code, Code::kOverLimit);
  EXPECT_EQ(in_flight("stream"), 1) << "the denied request kept its lease";
  EXPECT_EQ(done("stream"), Code::kOk);  // the denied request's end: owed, settled
  EXPECT_EQ(in_flight("stream"), 1);
  EXPECT_EQ(done("stream"), Code::kOk);  // the first's
  EXPECT_EQ(in_flight("stream"), 0);

  EXPECT_EQ(start("both"), Code::kOk);  // its one slot, and one of its 5 tokens
  EXPECT_EQ(out[0].remaining, 4u);
  EXPECT_EQ(start("both"), Code::kOverLimit);
  EXPECT_TRUE(out[0].concurrency_over);
  EXPECT_EQ(remaining("both", "v"), 4u) << "a request over its concurrency was charged a token";
  EXPECT_EQ(done("both"), Code::kOk);  // the denied one's
  EXPECT_EQ(done("both"), Code::kOk);  // the first's: releases, gives no token back
  EXPECT_EQ(in_flight("both"), 0);
  EXPECT_EQ(remaining("both", "v"), 4u) << "a release gave rate tokens back";
}

// shadow_mode: over answers OK (shadow_over) and takes nothing; its end settles what it owed.
TEST_F(RlsDecideLeases, AShadowConcurrencyNeverDeniesAndItsEndFreesNobody) {
  EXPECT_EQ(start("watch"), Code::kOk);
  EXPECT_EQ(start("watch"), Code::kOk);
  EXPECT_TRUE(out[0].shadow_over);
  EXPECT_EQ(in_flight("watch"), 1);
  EXPECT_EQ(done("watch"), Code::kOk);
  EXPECT_EQ(in_flight("watch"), 1);
  EXPECT_EQ(done("watch"), Code::kOk);
  EXPECT_EQ(in_flight("watch"), 0);
}

// A stream whose end never comes is freed at the descriptor's lease_ttl.
TEST_F(RlsDecideLeases, AStreamWhoseEndNeverComesIsFreedAtTheLeaseTtl) {
  EXPECT_EQ(start("stream"), Code::kOk);
  EXPECT_EQ(handler_.leases->expire(30 * kSec - 1, 100), 0u);
  EXPECT_EQ(handler_.leases->expire(30 * kSec, 100), 1u);
  EXPECT_EQ(in_flight("stream"), 0);
}

TEST(RlsConcurrencyConfig, BadValuesNameTheirFileAndLine) {
  const auto error_of = [](const char* text) -> std::string {
    try {
      parse_rls_config({{"rls.yaml", text}});
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(error_of("domain: d\ndescriptors:\n  - key: a\n    lease_ttl: 5s\n").find("rls.yaml:4"), std::string::npos);
  EXPECT_NE(error_of("domain: d\ndescriptors:\n  - key: a\n    lease_ttl: 5s\n").find("without `concurrency`"),
            std::string::npos);
  EXPECT_NE(error_of("domain: d\ndescriptors:\n  - key: a\n    concurrency: 0\n").find("rls.yaml:4"),
            std::string::npos);
  EXPECT_NE(error_of("domain: d\ndescriptors:\n  - key: a\n    concurrency: 2\n    lease_ttl: 0s\n").find("rls.yaml:5"),
            std::string::npos);
  // A key the rules' concurrency_match knows, and the rule's limit and TTL.
  auto config = parse_rls_config({{"rls.yaml", kLeaseConfig}});
  const RuleSet rules({}, std::nullopt, config);
  const RlsEntry e{"stream", "x"};
  const RlsMatch m = config->match("d", {&e, 1});
  const uint32_t i = rules.concurrency_match(m.concurrency_key);
  ASSERT_NE(i, RuleSet::kUnlimited);
  EXPECT_EQ(rules.concurrency_rules()[i].limit, 2);
  EXPECT_EQ(rules.concurrency_rules()[i].ttl_ns, 30 * kSec);
  EXPECT_EQ(rules.concurrency_rules()[i].match, "rls:d.stream");
  EXPECT_TRUE(m.key.empty()) << "concurrency alone: no rate bucket";
}

TEST(RlsValueMetrics, CountsHitsByValueAndAnswerUpToTheCapThenCountsTheDrops) {
  const auto config = parse_rls_config({{"rls.yaml", R"(domain: d
descriptors:
  - key: user
    value_to_metric: true
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: plain
    rate_limit: {unit: second, requests_per_unit: 2}
)"}});
  TableHandler handler(config);
  ValueMetrics metrics(2);  // two values of one limit at most
  size_t dropped = 0;
  auto run = [&](std::string_view user, uint64_t hits) {
    Plan plan;
    EXPECT_EQ(plan_request(config, "d", 0, {desc({{"user", user}}, hits), desc({{"plain", "p"}}, 0)}, 256, plan), "");
    std::vector<DescriptorResult> out;
    decide(handler, plan, out);
    dropped += metrics.count(plan, out);
  };
  run("ann", 1);
  run("ann", 1);
  run("ann", 1);  // over: 2/s
  run("bob", 2);
  run("cid", 1);  // a third value of the limit: not kept
  EXPECT_EQ(dropped, 1u);
  const std::vector<ValueMetrics::Series> s = metrics.snapshot();
  ASSERT_EQ(s.size(), 2u) << "plain has no per-value name";
  EXPECT_EQ(s[0].name, "d.user_ann");
  EXPECT_EQ(s[0].rule, "d.user");
  EXPECT_EQ(s[0].within_limit, 2u);
  EXPECT_EQ(s[0].over_limit, 1u);
  EXPECT_EQ(s[1].name, "d.user_bob");
  EXPECT_EQ(s[1].within_limit, 2u) << "hits, not calls";
  run("ann", 0);  // a kept value is counted whatever the cap
  EXPECT_EQ(dropped, 1u);
  EXPECT_EQ(ValueMetrics(0).count(Plan{}, {}), 0u);
}
}  // namespace

}  // namespace tollgate::rls
