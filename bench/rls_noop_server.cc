// tollgate-rls-noop: the floor of Envoy's rate limit service on this machine. A grpc++ callback
// server (the same gRPC, the same proto, the same kind of server as tollgated's RlsServer) whose
// ShouldRateLimit answers OK with one OK status per descriptor and does nothing else: no config,
// no key, no hop to another thread. What tollgated costs above it is what tollgate adds to gRPC
// (scripts/rls-latency measures both in one run).
//
//   tollgate-rls-noop --listen 127.0.0.1:PORT|unix:PATH   # serves until SIGTERM or SIGINT
//   tollgate-rls-noop --engine nghttp2 --listen 127.0.0.1:PORT   # the same on our own HTTP/2
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "rls_noop_h2.h"

namespace {

namespace pb = envoy::service::ratelimit::v3;

class Noop final : public pb::RateLimitService::CallbackService {
  grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* ctx, const pb::RateLimitRequest* request,
                                            pb::RateLimitResponse* response) override {
    response->set_overall_code(pb::RateLimitResponse::OK);
    for (int i = 0; i < request->descriptors_size(); ++i) {
      response->add_statuses()->set_code(pb::RateLimitResponse::OK);
    }
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A gRPC rate limit service that answers OK and does nothing else: the floor for tollgated's"};
  std::string listen;
  std::string engine = "grpc";
  app.add_option("--listen", listen, "HOST:PORT or unix:PATH")->required();
  app.add_option("--engine", engine,
                 "grpc: gRPC C++'s callback server; nghttp2: the daemon's own HTTP/2 session on one thread "
                 "(docs/rls-h2-plan.md's "
                 "phase 0; TCP only)")
      ->check(CLI::IsMember({"grpc", "nghttp2"}));
  CLI11_PARSE(app, argc, argv);
  if (engine == "nghttp2") return tollgate::bench::serve_nghttp2(listen);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);  // before gRPC's threads, which inherit it
  Noop service;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    std::fprintf(stderr, "tollgate-rls-noop: cannot listen on %s\n", listen.c_str());
    return 1;
  }
  std::printf("serving on %s\n", listen.c_str());
  std::fflush(stdout);
  int signal = 0;
  sigwait(&stop_signals, &signal);
  server->Shutdown();
  return 0;
}
