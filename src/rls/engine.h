// What serves the rate limit service's calls for an RlsServer (rls_server.h): gRPC C++
// (grpc_engine.cc, the default) or our own HTTP/2 on libnghttp2 (native_engine.cc,
// --rls-server native; docs/rls-h2-plan.md). Both take calls through the same CallPath.
#ifndef TOLLGATE_SRC_RLS_ENGINE_H_
#define TOLLGATE_SRC_RLS_ENGINE_H_

#include <boost/asio/io_context.hpp>
#include <memory>
#include <string>

#include "rls/call_path.h"
#include "rls/rls_server.h"

namespace tollgate::rls {

// RlsServer's methods of the same names (rls_server.h says what each does).
class RlsEngine {
 public:
  virtual ~RlsEngine() = default;
  virtual std::string start() = 0;
  virtual const std::string& address() const = 0;
  virtual bool is_loopback() const = 0;
  virtual bool is_tls() const = 0;
  virtual bool is_mutual_tls() const = 0;
  virtual void drain() = 0;
  virtual void stop() = 0;
  virtual void shutdown() = 0;
};

// `options` and `path` outlive the engine.
std::unique_ptr<RlsEngine> make_grpc_engine(boost::asio::io_context& node_io, const RlsServerOptions& options,
                                            CallPath& path);
std::unique_ptr<RlsEngine> make_native_engine(const RlsServerOptions& options, CallPath& path);

}  // namespace tollgate::rls

#endif  // TOLLGATE_SRC_RLS_ENGINE_H_
