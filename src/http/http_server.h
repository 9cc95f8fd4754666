// The HTTP front end (Boost.Beast), on a thread of its own: reads requests, hands them to the
// routes (src/http/routes.h), and writes the answers. Checks run on the node's thread, queued
// (bounded) through its io_context; nothing else of HTTP ever runs there.
//
// Limits: connections, in all and per client (IP address): at a limit, a newcomer takes the place
// of the least recently active connection that is waiting for a request (the client's own at its
// limit, else of the client holding most), and is closed at once only when every connection is
// busy with a request (counted); header and body bytes (431 and 413), a
// connection's read buffer (a chunk line or trailer that outgrows it: 400),
// a deadline for reading each request and writing its answer (a slow or idle client is closed,
// counted), jobs waiting for the node (beyond: 503), and how long a job may wait for the node
// before it is answered 503 uncharged.
//
// No Beast header leaks from here: the daemon includes this file only.
#ifndef TOLLGATE_SRC_HTTP_HTTP_SERVER_H_
#define TOLLGATE_SRC_HTTP_HTTP_SERVER_H_

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "http/routes.h"
#include "request/request_handler.h"
#include "tollgate/rls_config.h"

namespace tollgate::http {

struct HttpServerOptions {
  std::string listen;            // "HOST:PORT" (or "tcp:HOST:PORT"); port 0: any
  size_t max_connections = 512;  // open at once
  // Open at once from one client (one IP address; every local process is 127.0.0.1).
  size_t max_connections_per_client = 256;
  size_t max_header_bytes = 8 * 1024;            // request line and headers
  size_t max_body_bytes = 64 * 1024;             // a POST body
  std::chrono::milliseconds io_timeout{10'000};  // to read a request (or wait for the next one), or write an answer
  size_t max_pending = 4096;                     // node jobs queued at once
  std::chrono::milliseconds node_wait{1'000};    // a job still waiting for the node after this: 503, uncharged
  RoutesOptions routes;
  // The handler's check, check_all and refund are safe from any thread (the key table is
  // concurrent): checks are decided on the HTTP thread as they are read, with no hop to the
  // node's thread and back. Other requests (members, stats, metrics, reset) still go there.
  bool decide_on_http_thread = false;
};

class HttpServer {
 public:
  // `handler` is called on `node_io`'s thread only (its check, check_all and refund on the HTTP
  // thread too with decide_on_http_thread).
  HttpServer(boost::asio::io_context& node_io, RequestHandler& handler, HttpServerOptions options);
  ~HttpServer();  // shutdown() if not done
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts the HTTP thread. Returns "" or what is wrong.
  std::string start(std::shared_ptr<const RlsConfig> config);
  // "127.0.0.1:8080", the port chosen if 0 was asked; valid after start().
  const std::string& address() const;
  bool is_loopback() const;

  void set_rls_config(std::shared_ptr<const RlsConfig> config);  // any thread
  // The bearer token requests need (Routes::set_token); "" for none. Any thread.
  void set_token(std::string token);
  void drain();  // /readyz answers 503 from now on; requests are still answered
  // On the node's thread: queued and later checks answer 503, uncharged (the node is leaving).
  void stop();
  // Off the node's thread: stops accepting, closes every connection and joins the HTTP thread.
  // Idempotent.
  void shutdown();

  // http.* counters: requests, responses by class, checks, connections.
  StatsList stats() const;
  // Their declarations (util/stat_def.h), the routes' included.
  static std::vector<StatDef> stat_defs();

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;  // shared: jobs queued on the node's io_context hold it
};

}  // namespace tollgate::http

#endif  // TOLLGATE_SRC_HTTP_HTTP_SERVER_H_
