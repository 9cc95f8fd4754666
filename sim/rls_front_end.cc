#include "rls_front_end.h"

#include <grpcpp/grpcpp.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "core/clock.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"

namespace tollgate::sim {
namespace {

namespace pb = envoy::service::ratelimit::v3;

// One `rate_limit` block for `limit`; `what` names the rule in errors.
void emit_rate_limit(YAML::Emitter& out, const Limit& limit, const std::string& what) {
  struct Unit {
    const char* name;
    int64_t seconds;
  };
  constexpr Unit kUnits[] = {{"hour", 3600}, {"minute", 60}, {"second", 1}};
  const Rate& rate = limit.rate;
  if (rate.period_ns % kNanosPerSecond != 0) {
    throw std::invalid_argument(what + ": an RLS config's periods are whole seconds; this rate's is " +
                                std::to_string(rate.period_ns) + " ns");
  }
  if (rate.tokens > int64_t(std::numeric_limits<uint32_t>::max())) {
    throw std::invalid_argument(what + ": requests_per_unit is at most 4294967295; this rate has " +
                                std::to_string(rate.tokens));
  }
  const int64_t seconds = rate.period_ns / kNanosPerSecond;
  const Unit unit =
      *std::find_if(std::begin(kUnits), std::end(kUnits), [&](const Unit& u) { return seconds % u.seconds == 0; });
  out << YAML::Key << "rate_limit" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "unit" << YAML::Value << unit.name;
  out << YAML::Key << "requests_per_unit" << YAML::Value << rate.tokens;
  if (seconds != unit.seconds) out << YAML::Key << "unit_multiplier" << YAML::Value << seconds / unit.seconds;
  out << YAML::Key << "burst" << YAML::Value << limit.burst;
  out << YAML::Key << "max_debt" << YAML::Value << limit.max_debt;
  if (limit.charge_when_over) out << YAML::Key << "charge_when_over" << YAML::Value << true;
  out << YAML::EndMap;
}

}  // namespace

std::string rls_config_from_rules(const RuleSet& rules) {
  struct Entry {
    const Rule* rule;
    size_t order;
  };
  std::vector<Entry> exact, wildcards;
  for (size_t i = 0; i < rules.rules().size(); ++i) {
    const Rule& r = rules.rules()[i];
    (r.match.find('*') == std::string::npos ? exact : wildcards).push_back({&r, i});
  }
  // The rules file's precedence among globs (RuleSet): the longest literal text before the first
  // '*' first, then the most literal characters, then rule order. An RLS config tries its
  // wildcards in file order, so they are written in this one.
  auto head = [](const Entry& e) { return e.rule->match.find('*'); };
  auto literal = [](const Entry& e) {
    return e.rule->match.size() - size_t(std::count(e.rule->match.begin(), e.rule->match.end(), '*'));
  };
  std::stable_sort(wildcards.begin(), wildcards.end(), [&](const Entry& a, const Entry& b) {
    return head(a) != head(b) ? head(a) > head(b) : literal(a) > literal(b);
  });

  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "domain" << YAML::Value << kRlsDomain;
  out << YAML::Key << "descriptors" << YAML::Value << YAML::BeginSeq;
  for (const std::vector<Entry>* group : {&exact, &wildcards}) {
    for (const Entry& e : *group) {
      out << YAML::BeginMap << YAML::Key << "key" << YAML::Value << kRlsDescriptorKey;
      out << YAML::Key << "value" << YAML::Value << YAML::DoubleQuoted << e.rule->match;
      emit_rate_limit(out, e.rule->limit, "rule \"" + e.rule->match + "\" (line " + std::to_string(e.rule->line) + ")");
      out << YAML::EndMap;
    }
  }
  if (rules.default_limit()) {
    out << YAML::BeginMap << YAML::Key << "key" << YAML::Value << kRlsDescriptorKey;
    emit_rate_limit(out, *rules.default_limit(), "the default limit");
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  if (!out.good()) throw std::logic_error("emitting the RLS config: " + out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

class RlsCaller::Impl {
 public:
  explicit Impl(const std::string& target) {
    grpc::ChannelArguments args;
    // A restarted daemon is found again quickly (gRPC's default backoff starts at 1 s).
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 5);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 50);
    channel_ = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
    stub_ = pb::RateLimitService::NewStub(channel_);
  }

  ~Impl() {
    std::unique_lock lock(mu_);
    idle_.wait(lock, [&] { return outstanding_ == 0; });
  }

  void check_async(const std::string& key, int64_t cost, std::chrono::milliseconds deadline, Done done) {
    if (cost < 1 || cost > int64_t(std::numeric_limits<uint32_t>::max())) {
      done(Outcome::kFailed, "a ShouldRateLimit cost is 1 to 4294967295, not " + std::to_string(cost));
      return;
    }
    auto* call = new Call;  // owned by the callback below
    call->done = std::move(done);
    call->request.set_domain(kRlsDomain);
    call->request.set_hits_addend(uint32_t(cost));
    pb::RateLimitDescriptor::Entry* entry = call->request.add_descriptors()->add_entries();
    entry->set_key(kRlsDescriptorKey);
    entry->set_value(key);
    call->context.set_deadline(std::chrono::system_clock::now() + deadline);
    {
      std::lock_guard lock(mu_);
      ++outstanding_;
    }
    stub_->async()->ShouldRateLimit(&call->context, &call->request, &call->response, [this, call](grpc::Status status) {
      if (!status.ok()) {
        call->done(Outcome::kFailed, "ShouldRateLimit: " + status.error_message() + " (gRPC code " +
                                         std::to_string(int(status.error_code())) + ")");
      } else if (call->response.overall_code() == pb::RateLimitResponse::OK) {
        call->done(Outcome::kAllowed, "");
      } else if (call->response.overall_code() == pb::RateLimitResponse::OVER_LIMIT) {
        call->done(Outcome::kDenied, "");
      } else {
        call->done(Outcome::kFailed,
                   "ShouldRateLimit answered overall_code " + std::to_string(int(call->response.overall_code())));
      }
      delete call;
      std::lock_guard lock(mu_);
      if (--outstanding_ == 0) idle_.notify_all();
    });
  }

  bool wait_connected(std::chrono::milliseconds timeout) {
    return channel_->WaitForConnected(std::chrono::system_clock::now() + timeout);
  }

 private:
  struct Call {
    grpc::ClientContext context;
    pb::RateLimitRequest request;
    pb::RateLimitResponse response;
    Done done;
  };

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::RateLimitService::Stub> stub_;
  std::mutex mu_;
  std::condition_variable idle_;
  uint64_t outstanding_ = 0;  // guarded by mu_
};

RlsCaller::RlsCaller(const std::string& target) : impl_(std::make_unique<Impl>(target)) {}
RlsCaller::~RlsCaller() = default;

void RlsCaller::check_async(const std::string& key, int64_t cost, std::chrono::milliseconds deadline, Done done) {
  impl_->check_async(key, cost, deadline, std::move(done));
}

bool RlsCaller::wait_connected(std::chrono::milliseconds timeout) { return impl_->wait_connected(timeout); }

}  // namespace tollgate::sim
