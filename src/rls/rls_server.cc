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

std::optional<api::Endpoint> parse_listen(const std::string& listen, std::string* why) {
  const bool prefixed = listen.starts_with("unix:") || listen.starts_with("tcp:");
  return api::parse_endpoint(prefixed ? listen : "tcp:" + listen, why);
}

std::string tcp_address(const api::Endpoint& bound) {
  const bool v6 = bound.host.find(':') != std::string::npos;
  return (v6 ? "[" + bound.host + "]" : bound.host) + ":" + std::to_string(bound.port);
}

CountedGate::CountedGate(const RlsServerOptions& options, CallPath& path, boost::asio::io_context& io)
    : path_(path),
      timer_(io),
      gate_(std::make_unique<ConnectionGate>(
          ConnectionGate::Options{options.max_connections, options.max_connections_per_client}, kernel_sockets())) {}

bool CountedGate::admit(int fd) {
  ConnectionGate::Held held;
  if (!describe_for_gate(fd, held).empty()) return false;  // gone before we could look at it, say
  gate_->admit(held);
  ++path_.connections_accepted;
  path_.connections_evicted.store(gate_->evicted());
  path_.connections_open.store(int64_t(gate_->open()));
  return true;
}

void CountedGate::start_sweeping() {
  timer_.expires_after(std::chrono::seconds(1));
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    gate_->sweep();
    path_.connections_open.store(int64_t(gate_->open()));
    start_sweeping();
  });
}

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
