#include "rls/xds_config.h"

#include <stdexcept>
#include <utility>
#include <vector>

#include "envoy/service/discovery/v3/ads.pb.h"
#include "ratelimit/config/ratelimit/v3/rls_conf.pb.h"
#include "util/printable.h"

namespace tollgate::rls {
namespace {

namespace conf = ratelimit::config::ratelimit::v3;

class Converter {
 public:
  explicit Converter(std::string source) : source_(std::move(source)) {}

  RlsDomain domain(const conf::RateLimitConfig& c) {
    RlsDomain d;
    d.domain = c.domain();
    d.source = source_;
    d.descriptors = list(c.descriptors(), "");
    return d;
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const { throw ConfigError(source_, 0, 0, problem); }

  std::vector<RlsDescriptor> list(const google::protobuf::RepeatedPtrField<conf::RateLimitDescriptor>& in,
                                  const std::string& path) {
    if (++depth_ > kMaxRlsDescriptorDepth) {
      fail("descriptors nest deeper than " + std::to_string(kMaxRlsDescriptorDepth) + " levels");
    }
    std::vector<RlsDescriptor> out;
    out.reserve(size_t(in.size()));
    for (const conf::RateLimitDescriptor& pd : in) {
      if (++descriptors_ > kMaxRlsDescriptors) {
        fail("more than " + std::to_string(kMaxRlsDescriptors) + " descriptors in one config");
      }
      RlsDescriptor d;
      d.key = pd.key();
      if (!pd.value().empty()) d.value = pd.value();  // "": any value, as the YAML's absent one
      // (Escaped for the messages it goes into: a key with a NUL is refused, and says so whole.)
      const std::string here =
          path + (path.empty() ? "" : " > ") + printable(d.key) + (d.value ? "=" + printable(*d.value) : "");
      // Errors of the RLS config name the descriptor by its path, there being no line to name.
      d.source = source_ + ": descriptor " + here;
      d.shadow_mode = pd.shadow_mode();
      d.detailed_metric = pd.detailed_metric();
      d.quota_mode = pd.quota_mode();
      if (pd.has_rate_limit()) {
        const conf::RateLimitPolicy& p = pd.rate_limit();
        RlsLimit l;
        l.name = p.name();
        l.unlimited = p.unlimited();
        l.requests_per_unit = p.requests_per_unit();
        if (p.unit() < conf::UNKNOWN || p.unit() > conf::WEEK) fail("unknown `unit` " + std::to_string(p.unit()));
        l.unit = RlsUnit(p.unit());
        for (const conf::RateLimitReplace& r : p.replaces()) l.replaces.push_back(r.name());
        d.rate_limit = std::move(l);
      }
      d.descriptors = list(pd.descriptors(), here);
      out.push_back(std::move(d));
    }
    --depth_;
    return out;
  }

  std::string source_;
  size_t depth_ = 0;
  size_t descriptors_ = 0;
};

}  // namespace

std::shared_ptr<const RlsConfig> config_from_xds(const envoy::service::discovery::v3::DiscoveryResponse& response,
                                                 const RlsLoadOptions& options) {
  std::vector<RlsDomain> domains;
  for (int i = 0; i < response.resources_size(); ++i) {
    const google::protobuf::Any& any = response.resources(i);
    const std::string which = "resource " + std::to_string(i + 1) + " of " + std::to_string(response.resources_size());
    if (any.type_url() != kRlsConfigTypeUrl) {
      throw std::runtime_error(which + " is a " + printable(any.type_url()) + ", not a " + kRlsConfigTypeUrl);
    }
    conf::RateLimitConfig config;
    if (!any.UnpackTo(&config)) throw std::runtime_error(which + " is not a readable RateLimitConfig");
    // Named as the reference names it in its errors: by the config's name, else its domain; with
    // any control byte escaped (a NUL would cut the NACK's message short).
    const std::string& named = !config.name().empty() ? config.name() : config.domain();
    const std::string name = named.empty() ? which : printable(named);
    domains.push_back(Converter(name).domain(config));
  }
  return make_rls_config(std::move(domains), options);
}

}  // namespace tollgate::rls
