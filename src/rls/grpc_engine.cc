// The rate limit service on gRPC C++ (the default engine; rls_server.h says how it threads).
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "api/endpoint.h"
#include "core/clock.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "request/decision_gate.h"
#include "request/listener.h"
#include "request/node_queue.h"
#include "rls/connection_gate.h"
#include "rls/decide.h"
#include "rls/engine.h"
#include "rls/tls_context.h"

namespace tollgate::rls {
namespace {

namespace pb = envoy::service::ratelimit::v3;
using SteadyTime = std::chrono::steady_clock::time_point;

// One call, from the gRPC thread that read it to the finisher that answers it.
struct Job {
  grpc::CallbackServerContext* ctx = nullptr;
  grpc::ServerUnaryReactor* reactor = nullptr;
  pb::RateLimitResponse* response = nullptr;
  const pb::RateLimitRequest* request = nullptr;  // gRPC's, valid until Finish
  Plan plan;
  std::optional<SteadyTime> deadline;
  size_t request_bytes = 0;  // counted against max_pending_bytes while queued
  Decided decided;           // set where it is decided
};

grpc::Status status_of(const Decided& d) { return grpc::Status(grpc::StatusCode(int(d.status)), d.message); }

class GrpcEngine final : public RlsEngine, public pb::RateLimitService::CallbackService {
 public:
  GrpcEngine(boost::asio::io_context& node_io, const RlsServerOptions& options, CallPath& path)
      : node_io_(node_io), options_(options), path_(path) {}

  ~GrpcEngine() override { shutdown(); }

  std::string start() override {
    std::string why;
    const auto endpoint = parse_listen(options_.listen, &why);
    if (!endpoint) return why;
    loopback_ = endpoint->is_loopback();
    std::string grpc_address;
    const bool unix_socket = endpoint->kind == api::Endpoint::Kind::kUnix;
    if (unix_socket) {
      // gRPC would replace a live socket at the path (and remove it when it stops): refuse one
      // another process serves, as the client API does; a stale one is removed here.
      if (std::string error = request::prepare_unix_socket_path(endpoint->path); !error.empty()) {
        return endpoint->path + ": " + error;
      }
      grpc_address = "unix:" + endpoint->path;
    } else {
      // TCP is accepted here, not by gRPC, so that connections are capped per client and in all
      // (connection_gate.h). Bound first: a port another process holds stops the start (our
      // listener sets no SO_REUSEPORT, so no second daemon can share it either).
      listener_ = std::make_shared<request::Listener>(accept_io_, *endpoint);
      if (std::string error = listener_->listen(0); !error.empty()) {
        listener_.reset();
        return "cannot serve gRPC on " + options_.listen + ": " + error;
      }
    }
    std::shared_ptr<grpc::ServerCredentials> credentials;
    if (std::string error = make_credentials(credentials); !error.empty()) return error;
    // The standard health service; global, so set before the builder.
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int port = 0;
    if (unix_socket) {
      builder.AddListeningPort(grpc_address, credentials, &port);
    } else {
      acceptor_ = builder.experimental().AddExternalConnectionAcceptor(
          grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, credentials);
    }
    builder.SetMaxReceiveMessageSize(int(options_.max_request_bytes));
    set_limits(builder);
    // No SO_REUSEPORT (gRPC's default on Linux): a second process, in the cluster or not, could
    // bind the same port and answer part of Envoy's calls from buckets of its own.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.RegisterService(this);
    // The socket file gets its mode below; until then the umask keeps it closed to all but us
    // (a umask of 0 would otherwise leave it open to everyone for a moment). The umask is the
    // process's: a file another thread creates meanwhile is only made stricter.
    const mode_t umask_before = unix_socket ? ::umask(0177) : 0;
    server_ = builder.BuildAndStart();
    if (unix_socket) ::umask(umask_before);
    if (!server_ || (unix_socket && port == 0)) {
      server_.reset();
      return "cannot serve gRPC on " + options_.listen + " (address in use, or not an address of this host?)";
    }
    // The documented mode, whatever the umask (0027 under the unit would give 0750: Envoy in the
    // daemon's group could not connect, and would let every request through).
    if (unix_socket && ::chmod(endpoint->path.c_str(), mode_t(options_.unix_socket_mode)) != 0) {
      const std::string error = "cannot set the socket file mode: " + std::string(std::strerror(errno));
      server_->Shutdown();
      server_.reset();
      return error;
    }
    if (unix_socket) {
      address_ = grpc_address;
    } else {
      address_ = tcp_address(listener_->bound());
      listener_->accept([this](const boost::system::error_code& ec, request::Listener::Socket socket) {
        if (!ec) hand_to_grpc(std::move(socket));
      });
      gate_.start_sweeping();
      accept_thread_ = std::thread([this] { accept_io_.run(); });
    }
    server_->GetHealthCheckService()->SetServingStatus(true);
    return {};
  }

  bool is_tls() const override { return !options_.tls_cert.empty(); }
  bool is_mutual_tls() const override { return !options_.tls_client_ca.empty(); }

  void drain() override {
    if (server_) server_->GetHealthCheckService()->SetServingStatus(false);
  }

  void stop() override {
    queue_.stop();
    // No decision on a gRPC thread starts from now on, and those under way end first: the node
    // seals what they charge when it leaves, right after this.
    path_.stop();
  }

  void shutdown() override {
    if (shut_down_.exchange(true)) return;
    queue_.shutdown();  // what the node never reached answers UNAVAILABLE, here
    stop_accepting();
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    finisher_.join();
    if (server_) server_->Wait();
    gate_.reset();  // the duplicates of connections gRPC has closed by now
  }

  const std::string& address() const override { return address_; }
  bool is_loopback() const override { return loopback_; }

  // gRPC thread: read, resolve and queue.
  grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* ctx, const pb::RateLimitRequest* request,
                                            pb::RateLimitResponse* response) override {
    ++path_.calls;
    auto* job = new Job;
    job->ctx = ctx;
    job->reactor = ctx->DefaultReactor();
    job->response = response;
    job->request = request;
    grpc::ServerUnaryReactor* reactor = job->reactor;  // the job is gone once finished
    if (std::string why = path_.plan(*request, job->plan); !why.empty()) {
      finish(job, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, why));
      return reactor;
    }
    // The caller's deadline, on our clock. None set: gRPC reports a time far in the future.
    const auto left = ctx->deadline() - std::chrono::system_clock::now();
    if (left < std::chrono::hours(24)) {
      job->deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::nanoseconds>(left);
    }
    if (options_.decide_on_grpc_threads) {
      decide_here(job);
    } else {
      job->request_bytes = request->ByteSizeLong();
      submit(job);
    }
    return reactor;
  }

 private:
  // Plaintext, TLS or mutual TLS, as the options say. The files are checked here, so that a
  // wrong path, a file that is not PEM or a key of another certificate stops the start with
  // their name (gRPC would only log it and serve nothing).
  std::string make_credentials(std::shared_ptr<grpc::ServerCredentials>& out) const {
    const RlsServerOptions& o = options_;
    if (o.tls_cert.empty() != o.tls_key.empty()) return "TLS needs both a certificate and its private key";
    if (o.tls_cert.empty()) {
      if (!o.tls_client_ca.empty()) return "a client CA (mutual TLS) needs a certificate and key of the server's own";
      out = grpc::InsecureServerCredentials();
      return {};
    }
    if (std::string error = check_pem_files(o.tls_cert, o.tls_key, o.tls_client_ca); !error.empty()) return error;
    auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        o.tls_key, o.tls_cert, o.tls_client_ca, o.tls_reload_seconds);
    grpc::experimental::TlsServerCredentialsOptions tls(provider);
    tls.watch_identity_key_cert_pairs();
    if (!o.tls_client_ca.empty()) {
      tls.watch_root_certs();
      tls.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    }
    out = grpc::experimental::TlsServerCredentials(tls);
    return out ? "" : "gRPC refused the TLS settings";
  }

  // Per-connection and overall bounds (RlsServerOptions).
  void set_limits(grpc::ServerBuilder& builder) const {
    const RlsServerOptions& o = options_;
    auto ms = [](std::chrono::milliseconds d) { return int(std::min<int64_t>(d.count(), INT32_MAX)); };
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, int(o.max_streams_per_connection));
    builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE, int(o.max_metadata_bytes));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, ms(o.max_connection_idle));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, ms(o.max_connection_age));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS, ms(o.max_connection_age_grace));
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, ms(o.keepalive_time));
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ms(o.keepalive_timeout));
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10'000);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
    builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, ms(o.handshake_timeout));
    grpc::ResourceQuota quota("tollgate-rls");
    quota.Resize(o.memory_quota_bytes);
    builder.SetResourceQuota(quota);
  }

  // Accept thread: a TCP connection through the gate, then to gRPC (which owns it from then on).
  void hand_to_grpc(request::Listener::Socket socket) {
    boost::system::error_code ignored;
    const int fd = socket.release(ignored);
    if (fd < 0) return;
    if (!gate_.admit(fd)) {
      ::close(fd);
      return;
    }
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters params;
    params.fd = fd;
    acceptor_->HandleNewConnection(&params);
  }

  void stop_accepting() {
    if (!accept_thread_.joinable()) return;
    boost::asio::post(accept_io_, [this] {
      listener_->close();
      gate_.stop_sweeping();
    });
    accept_thread_.join();
  }

  // gRPC thread: queue the call for the node's thread (request/node_queue.h: bounded in calls and
  // bytes, a call whose deadline passed answered uncharged, UNAVAILABLE once stopped).
  void submit(Job* job) {
    const auto deadline = job->deadline.value_or(request::NodeQueue::Clock::time_point::max());
    ++path_.queued;  // before: the node's thread may take it at once
    const bool queued = queue_.submit([this, job](request::NodeQueue::Outcome outcome) { decide_queued(job, outcome); },
                                      deadline, job->request_bytes);
    if (queued) return;
    --path_.queued;
    if (shut_down_.load()) {
      ++path_.unavailable;
      return finish(job, grpc::Status(grpc::StatusCode::UNAVAILABLE, "tollgated is shutting down"));
    }
    ++path_.busy;
    finish(job, grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "tollgated has too many rate limit calls waiting"));
  }

  // gRPC thread (decide_on_grpc_threads): decide and answer the call now. Just read, so neither
  // its deadline nor a cancellation can have come yet. Once stop() began it is not charged
  // (request/decision_gate.h).
  void decide_here(Job* job) {
    path_.decide_here(job->plan, job->decided);
    answer(job);
  }

  // Node thread (or, kShutDown, the thread shutting down): decide a queued call, or say why not,
  // then hand it to the finisher.
  void decide_queued(Job* job, request::NodeQueue::Outcome outcome) {
    using Outcome = request::NodeQueue::Outcome;
    --path_.queued;
    if (outcome == Outcome::kShutDown) {
      ++path_.unavailable;
      return finish(job, grpc::Status(grpc::StatusCode::UNAVAILABLE, "tollgated is shutting down"));
    }
    Decided& d = job->decided;
    // Planned against a config since replaced: plan again, so that the limits, flags and keys
    // are those of the rules the node now decides with.
    if (outcome == Outcome::kRun && job->plan.config != path_.config()) {
      if (std::string why = path_.plan(*job->request, job->plan); !why.empty()) {
        d.status = wire::Code::kInvalidArgument;
        d.message = why;
      }
    }
    if (outcome == Outcome::kStopped) {
      ++path_.unavailable;
      d.status = wire::Code::kUnavailable;
      d.message = "tollgated is shutting down";
    } else if (d.status != wire::Code::kOk) {
      // invalid: counted by plan()
    } else if (outcome == Outcome::kExpired) {
      ++path_.deadline_expired;
      d.status = wire::Code::kDeadlineExceeded;
      d.message = "the deadline passed before the check ran";
    } else if (job->ctx->IsCancelled()) {
      ++path_.cancelled;
      d.status = wire::Code::kCancelled;
      d.message = "cancelled before the check ran";
    } else {
      path_.decide_on_node(job->plan, d);
    }
    boost::asio::post(finisher_, [this, job] { answer(job); });
  }

  // Finisher thread: build the response and finish the call.
  void answer(Job* job) {
    if (job->decided.status != wire::Code::kOk) return finish(job, status_of(job->decided));
    path_.respond(*job->request, job->plan, job->decided, *job->response);
    finish(job, grpc::Status::OK);
  }

  // Every call is finished exactly once, here; the job goes with it. `status` by value: it may
  // be the job's own.
  static void finish(Job* job, grpc::Status status) {
    grpc::ServerUnaryReactor* reactor = job->reactor;
    delete job;
    reactor->Finish(std::move(status));
  }

  boost::asio::io_context& node_io_;
  const RlsServerOptions& options_;
  CallPath& path_;
  // TCP: accepted on a thread of its own, through the gate, handed to gRPC by acceptor_.
  boost::asio::io_context accept_io_;
  std::shared_ptr<request::Listener> listener_;
  // The duplicates of connections gRPC holds: a connection gone is forgotten within a second.
  CountedGate gate_{options_, path_, accept_io_};
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  std::thread accept_thread_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  bool loopback_ = true;
  boost::asio::thread_pool finisher_{1};

  request::NodeQueue queue_{node_io_, options_.max_pending, options_.max_pending_bytes};
  std::atomic<bool> shut_down_{false};
};

}  // namespace

std::unique_ptr<RlsEngine> make_grpc_engine(boost::asio::io_context& node_io, const RlsServerOptions& options,
                                            CallPath& path) {
  return std::make_unique<GrpcEngine>(node_io, options, path);
}

}  // namespace tollgate::rls
