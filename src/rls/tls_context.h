// The rate limit service's TLS on our own HTTP/2 (--rls-server native): an OpenSSL server
// context (through Boost.Asio's ssl::context) made from a certificate chain, its key and, for
// mutual TLS, the CAs whose client certificates are accepted. TLS 1.2 and up, ALPN "h2" only.
// The files are read again when they change (as gRPC's FileWatcherCertificateProvider does for
// the gRPC engine): a renewed certificate serves the next connections, a broken or half-written
// one leaves the last good context in force.
#ifndef TOLLGATE_SRC_RLS_TLS_CONTEXT_H_
#define TOLLGATE_SRC_RLS_TLS_CONTEXT_H_

#include <ctime>
#include <memory>
#include <string>
#include <vector>

namespace boost::asio::ssl {
class context;
}

namespace tollgate::rls {

// The TLS files checked as a server will load them: a certificate chain, its private key
// (matching its first certificate, not encrypted), and the client CAs if any. "" or what is
// wrong, naming the file.
std::string check_pem_files(const std::string& cert, const std::string& key, const std::string& client_ca);

class TlsFiles {
 public:
  TlsFiles(std::string cert, std::string key, std::string client_ca);
  ~TlsFiles();

  // Reads the files: "" or what is wrong (then current() stays as it was).
  std::string load();
  // load() if a file changed (its size, modification or inode) since the last good load: "" when
  // nothing changed or the new files are in force, else why not (the last good ones stay; the
  // same broken files are reported once).
  std::string reload_if_changed();
  // The context new connections take (shared: a connection keeps the one it began with).
  std::shared_ptr<boost::asio::ssl::context> current() const { return current_; }
  bool mutual() const { return !client_ca_.empty(); }
  int reloads() const { return reloads_; }

 private:
  struct Stamp {
    long long size = -1, mtime_ns = -1, inode = -1;
    bool operator==(const Stamp&) const = default;
  };
  std::vector<Stamp> stamps() const;

  std::string cert_, key_, client_ca_;
  std::shared_ptr<boost::asio::ssl::context> current_;
  std::vector<Stamp> loaded_, failed_;
  int reloads_ = 0;
};

}  // namespace tollgate::rls

#endif  // TOLLGATE_SRC_RLS_TLS_CONTEXT_H_
