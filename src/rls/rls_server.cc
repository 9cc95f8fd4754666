// RlsServer: the options and the call path, and the engine that serves them (engine.h).
#include "rls/rls_server.h"

#include "rls/call_path.h"
#include "rls/engine.h"

namespace tollgate::rls {

class RlsServer::Impl {
 public:
  Impl(boost::asio::io_context& node_io, RequestHandler& handler, RlsServerOptions options)
      : options_(std::move(options)), path_(handler, options_) {
    engine_ = options_.engine == RlsServerOptions::Engine::kNative ? make_native_engine(options_, path_)
                                                                   : make_grpc_engine(node_io, options_, path_);
  }
  ~Impl() { engine_->shutdown(); }

  RlsServerOptions options_;
  CallPath path_;
  std::unique_ptr<RlsEngine> engine_;
};

RlsServer::RlsServer(boost::asio::io_context& node_io, RequestHandler& handler, RlsServerOptions options)
    : impl_(std::make_unique<Impl>(node_io, handler, std::move(options))) {}
RlsServer::~RlsServer() = default;
std::string RlsServer::start(std::shared_ptr<const RlsConfig> config) {
  impl_->path_.set_config(std::move(config));
  return impl_->engine_->start();
}
const std::string& RlsServer::address() const { return impl_->engine_->address(); }
bool RlsServer::is_loopback() const { return impl_->engine_->is_loopback(); }
bool RlsServer::is_tls() const { return impl_->engine_->is_tls(); }
bool RlsServer::is_mutual_tls() const { return impl_->engine_->is_mutual_tls(); }
void RlsServer::set_config(std::shared_ptr<const RlsConfig> config) { impl_->path_.set_config(std::move(config)); }
void RlsServer::drain() { impl_->engine_->drain(); }
void RlsServer::stop() { impl_->engine_->stop(); }
void RlsServer::shutdown() { impl_->engine_->shutdown(); }
StatsList RlsServer::stats() const { return impl_->path_.stats(); }
std::vector<ValueMetrics::Series> RlsServer::value_metrics() const { return impl_->path_.value_metrics(); }
std::vector<StatDef> RlsServer::stat_defs() { return CallPath::stat_defs(); }

}  // namespace tollgate::rls
