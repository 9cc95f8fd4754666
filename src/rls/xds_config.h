// RLS configs from an xDS server's answer (state of the world): every RateLimitConfig resource
// of a DiscoveryResponse, as the reference's GRPC_XDS_SOTW provider reads them, made into one
// RlsConfig. No gRPC here: the client (xds_client.h) does the stream.
#ifndef TOLLGATE_SRC_RLS_XDS_CONFIG_H_
#define TOLLGATE_SRC_RLS_XDS_CONFIG_H_

#include <memory>
#include <string>

#include "tollgate/rls_config.h"
#include "tollgate/rls_config_file.h"

namespace envoy::service::discovery::v3 {
class DiscoveryResponse;
}

namespace tollgate::rls {

// The type URL of envoyproxy/ratelimit's RLS config resource.
inline constexpr char kRlsConfigTypeUrl[] = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

// The config `response` holds: one domain per resource (merged by domain if options say so), the
// whole state (no resource: no domain). Throws ConfigError ("NAME: problem", NAME the resource's
// name, as the reference's NACKs say) or std::runtime_error (a resource of another type, or
// bytes that are not a RateLimitConfig).
std::shared_ptr<const RlsConfig> config_from_xds(const envoy::service::discovery::v3::DiscoveryResponse& response,
                                                 const RlsLoadOptions& options);

}  // namespace tollgate::rls

#endif  // TOLLGATE_SRC_RLS_XDS_CONFIG_H_
