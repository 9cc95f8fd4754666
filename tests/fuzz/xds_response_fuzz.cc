// What an xDS management server answers (--rls-xds): any bytes as a DiscoveryResponse, its
// resources made into an RLS config (rls::config_from_xds, on the xDS client's thread), with and
// without --rls-merge-domains.
//
// Contract: a response that parses gives a config, or a ConfigError or std::runtime_error (the
// NACK's message, never empty: a name with a NUL once cut it to nothing), never anything else; a config has one domain
// per resource unmerged, and every limited limit it holds is found again by its own label.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "envoy/service/discovery/v3/ads.pb.h"
#include "fuzz_util.h"
#include "rls/xds_config.h"
#include "tollgate/config_error.h"

namespace {

void one(const envoy::service::discovery::v3::DiscoveryResponse& response, bool merge) {
  std::shared_ptr<const tollgate::RlsConfig> config;
  try {
    config = tollgate::rls::config_from_xds(response, {.merge_domains = merge});
  } catch (const std::exception& e) {
    FUZZ_CHECK(std::string(e.what()).size() > 0, "a refusal says why");
    return;
  }
  FUZZ_CHECK(config != nullptr, "a config or a refusal");
  if (!merge) FUZZ_CHECK(config->domains().size() == size_t(response.resources_size()), "one domain a resource");
  for (uint32_t i = 0; i < config->limit_count(); ++i) {
    FUZZ_CHECK(config->limit(i).limited(), "only limited limits are registered");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  google::protobuf::LogSilencer quiet;  // strings that are not UTF-8 are refused, not logged each time
  envoy::service::discovery::v3::DiscoveryResponse response;
  if (!response.ParseFromArray(data, int(size))) return 0;
  one(response, false);
  one(response, true);
  return 0;
}
