#include "rls/xds_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <random>
#include <span>
#include <thread>

#include "config/read_file.h"
#include "envoy/service/discovery/v3/ads.grpc.pb.h"
#include "rls/xds_config.h"
#include "util/printable.h"

namespace tollgate::rls {

namespace ads = envoy::service::discovery::v3;

class XdsClient::Impl {
 public:
  Impl(XdsClientOptions options, OnConfig on_config, Log log)
      : options_(std::move(options)), on_config_(std::move(on_config)), log_(std::move(log)) {}

  ~Impl() { stop(); }

  std::string start() {
    if (std::string error = read_tls(nullptr); !error.empty()) return error;
    thread_ = std::thread([this] { run(); });
    return {};
  }

  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      if (context_ != nullptr) context_->TryCancel();
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  using Stat = StatField<Impl, std::atomic<int64_t>>;
  static std::span<const Stat> stat_table() {
    static const Stat kStats[] = {
        {{"rls_xds_connected", StatKind::kGauge,
          "1 while the stream to the xDS server (--rls-xds) is open and has answered, else 0"},
         &Impl::connected_},
        {{"rls_xds_streams", StatKind::kCounter,
          "Streams opened to the xDS server (the first, then each reconnection)"},
         &Impl::streams_},
        {{"rls_xds_acks", StatKind::kCounter, "xDS responses accepted: their RLS config put in force"}, &Impl::acks_},
        {{"rls_xds_nacks", StatKind::kCounter,
          "xDS responses refused (NACKed, the config in force kept): a config that does not load, or a resource "
          "of another type"},
         &Impl::nacks_},
    };
    return kStats;
  }
  StatsList stats() const {
    StatsList s;
    append_stats(stat_table(), *this, s);
    return s;
  }

 private:
  // The TLS files, read (into `out`, when given) to check or to connect. "" or what is wrong.
  std::string read_tls(grpc::SslCredentialsOptions* out) const {
    const XdsClientOptions& o = options_;
    if (o.tls_ca.empty()) return {};
    grpc::SslCredentialsOptions ssl;
    try {
      ssl.pem_root_certs = read_config_file(o.tls_ca, "xDS server CA file");
      if (!o.tls_cert.empty()) ssl.pem_cert_chain = read_config_file(o.tls_cert, "xDS client certificate file");
      if (!o.tls_key.empty()) ssl.pem_private_key = read_config_file(o.tls_key, "xDS client key file");
    } catch (const std::exception& e) {
      return e.what();
    }
    if (out) *out = std::move(ssl);
    return {};
  }

  std::shared_ptr<grpc::Channel> channel(std::string* error) const {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(int(std::min<size_t>(options_.max_message_bytes, INT32_MAX)));
    // One connection of its own, not one shared with another channel to the same server.
    args.SetInt("grpc.use_local_subchannel_pool", 1);
    std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
    if (!options_.tls_ca.empty()) {
      grpc::SslCredentialsOptions ssl;
      if (*error = read_tls(&ssl); !error->empty()) return nullptr;
      credentials = grpc::SslCredentials(ssl);
      if (!options_.tls_server_name.empty()) args.SetSslTargetNameOverride(options_.tls_server_name);
    }
    return grpc::CreateCustomChannel(options_.server, credentials, args);
  }

  ads::DiscoveryRequest request() const {
    ads::DiscoveryRequest r;
    ads::Node* node = r.mutable_node();
    node->set_id(options_.node_id);
    node->set_user_agent_name("tollgated");
    for (const auto& [key, value] : options_.node_metadata) {
      ads::NodeStruct::Field* f = node->mutable_metadata()->add_fields();
      f->set_key(key);
      f->mutable_value()->set_string_value(value);
    }
    r.set_type_url(kRlsConfigTypeUrl);
    r.set_version_info(version_);  // the version in force ("" before any)
    return r;
  }

  void run() {
    std::mt19937_64 random(std::random_device{}());
    std::chrono::milliseconds backoff = options_.backoff_initial;
    while (!stopped()) {
      std::string why;
      if (std::shared_ptr<grpc::Channel> ch = channel(&why)) {
        if (stream(ch)) backoff = options_.backoff_initial;  // a response came: the server works
      } else {
        log_(true, "xDS: cannot connect to " + options_.server + ": " + why);
      }
      // Jittered (0.5x to 1.5x), doubling up to the maximum: many daemons restarted together do
      // not come back to the server in step.
      std::uniform_real_distribution<double> jitter(0.5, 1.5);
      const auto wait = std::chrono::milliseconds(int64_t(double(backoff.count()) * jitter(random)));
      backoff = std::min(backoff * 2, options_.backoff_max);
      std::unique_lock lock(mu_);
      wake_.wait_for(lock, wait, [this] { return stopping_; });
    }
  }

  bool stopped() {
    std::lock_guard lock(mu_);
    return stopping_;
  }

  // One stream, until it ends. Whether a response came on it.
  bool stream(const std::shared_ptr<grpc::Channel>& ch) {
    auto stub = ads::AggregatedDiscoveryService::NewStub(ch);
    grpc::ClientContext context;
    for (const auto& [name, value] : options_.headers) context.AddMetadata(name, value);
    {
      std::lock_guard lock(mu_);
      if (stopping_) return false;
      context_ = &context;
    }
    ++streams_;
    auto s = stub->StreamAggregatedResources(&context);
    bool answered = false;
    if (s->Write(request())) {
      ads::DiscoveryResponse response;
      while (s->Read(&response)) {
        if (!answered) log_(false, "xDS: " + options_.server + " answers (node id \"" + options_.node_id + "\")");
        answered = true;
        connected_ = 1;
        if (!s->Write(answer(response))) break;
      }
    }
    s->WritesDone();
    const grpc::Status status = s->Finish();
    connected_ = 0;
    {
      std::lock_guard lock(mu_);
      context_ = nullptr;
      if (stopping_) return answered;
    }
    log_(true, "xDS: the stream to " + options_.server + " ended (" + std::to_string(int(status.error_code())) +
                   (status.error_message().empty() ? "" : ": " + status.error_message()) + "); connecting again");
    return answered;
  }

  // The ACK or NACK of `response`; an accepted config handed on first.
  ads::DiscoveryRequest answer(const ads::DiscoveryResponse& response) {
    std::string error;
    if (response.type_url() != kRlsConfigTypeUrl) {
      error = "tollgated asks for " + std::string(kRlsConfigTypeUrl) + " only, not " + printable(response.type_url());
    } else {
      try {
        std::shared_ptr<const RlsConfig> config = config_from_xds(response, options_.load);
        on_config_(std::move(config), response.version_info());
        version_ = response.version_info();
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    ads::DiscoveryRequest r = request();  // version_info: the version in force, whichever
    r.set_response_nonce(response.nonce());
    if (error.empty()) {
      ++acks_;
    } else {
      ++nacks_;
      log_(true, "xDS: version \"" + printable(response.version_info()) + "\" refused, version \"" +
                     printable(version_) + "\" stays in force: " + error);
      r.mutable_error_detail()->set_code(int32_t(grpc::StatusCode::INVALID_ARGUMENT));
      r.mutable_error_detail()->set_message(error);
    }
    return r;
  }

  const XdsClientOptions options_;
  const OnConfig on_config_;
  const Log log_;
  std::string version_;  // in force; the client's thread's
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;                   // under mu_
  grpc::ClientContext* context_ = nullptr;  // the open stream's, under mu_
  std::atomic<int64_t> connected_{0}, streams_{0}, acks_{0}, nacks_{0};
};

XdsClient::XdsClient(XdsClientOptions options, OnConfig on_config, Log log)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(on_config), std::move(log))) {}
XdsClient::~XdsClient() = default;
std::string XdsClient::start() { return impl_->start(); }
void XdsClient::stop() { impl_->stop(); }
StatsList XdsClient::stats() const { return impl_->stats(); }
std::vector<StatDef> XdsClient::stat_defs() {
  std::vector<StatDef> defs;
  append_stat_defs(Impl::stat_table(), defs);
  return defs;
}

}  // namespace tollgate::rls
