#include "rls/tls_context.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <boost/asio/ssl/context.hpp>
#include <exception>

#include "config/read_file.h"

namespace tollgate::rls {
namespace {

// The PEM blocks of `path` as OpenSSL reads them, through `read` (PEM_read_bio_X509, ...):
// how many there are, or an error naming the file.
template <typename Read, typename Free>
std::string read_pem(const std::string& path, const char* what, Read read, Free free_one, int* count,
                     std::vector<void*>* keep = nullptr) {
  std::string text;
  try {
    text = read_config_file(path, what);
  } catch (const std::exception& e) {
    return e.what();
  }
  BIO* bio = BIO_new_mem_buf(text.data(), int(text.size()));
  if (bio == nullptr) return path + ": out of memory";
  *count = 0;
  // Never a passphrase prompt (OpenSSL's default callback reads the terminal): an encrypted key
  // is refused like a missing one.
  pem_password_cb* no_passphrase = [](char*, int, int, void*) { return 0; };
  while (auto* item = read(bio, nullptr, no_passphrase, nullptr)) {
    ++*count;
    if (keep) {
      keep->push_back(item);
    } else {
      free_one(item);
    }
  }
  ERR_clear_error();  // the read that ended the loop
  BIO_free(bio);
  return *count > 0 ? "" : path + ": no PEM " + what + " in it";
}

}  // namespace

std::string check_pem_files(const std::string& cert, const std::string& key, const std::string& client_ca) {
  int n = 0;
  std::vector<void*> certs;
  if (std::string e = read_pem(cert, "certificate", PEM_read_bio_X509, X509_free, &n, &certs); !e.empty()) return e;
  std::vector<void*> keys;
  std::string error = read_pem(key, "private key", PEM_read_bio_PrivateKey, EVP_PKEY_free, &n, &keys);
  if (error.empty() &&
      X509_check_private_key(static_cast<X509*>(certs.front()), static_cast<EVP_PKEY*>(keys.front())) != 1) {
    ERR_clear_error();
    error = key + ": this private key is not the key of " + cert + "'s certificate";
  }
  for (void* c : certs) X509_free(static_cast<X509*>(c));
  for (void* k : keys) EVP_PKEY_free(static_cast<EVP_PKEY*>(k));
  if (!error.empty() || client_ca.empty()) return error;
  return read_pem(client_ca, "CA certificate", PEM_read_bio_X509, X509_free, &n);
}

namespace {

// ALPN: HTTP/2 or nothing (gRPC's clients and Envoy offer "h2").
int select_h2(SSL*, const unsigned char** out, unsigned char* out_len, const unsigned char* in, unsigned int in_len,
              void*) {
  static const unsigned char kH2[] = {2, 'h', '2'};
  unsigned char* chosen = nullptr;
  if (SSL_select_next_proto(&chosen, out_len, kH2, sizeof kH2, in, in_len) != OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

TlsFiles::TlsFiles(std::string cert, std::string key, std::string client_ca)
    : cert_(std::move(cert)), key_(std::move(key)), client_ca_(std::move(client_ca)) {}
TlsFiles::~TlsFiles() = default;

std::vector<TlsFiles::Stamp> TlsFiles::stamps() const {
  std::vector<Stamp> out;
  for (const std::string* path : {&cert_, &key_, &client_ca_}) {
    Stamp s;
    struct stat st {};
    if (!path->empty() && ::stat(path->c_str(), &st) == 0) {
      s = {static_cast<long long>(st.st_size),
           static_cast<long long>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
           static_cast<long long>(st.st_ino)};
    }
    out.push_back(s);
  }
  return out;
}

std::string TlsFiles::load() {
  const std::vector<Stamp> before = stamps();
  if (std::string error = check_pem_files(cert_, key_, client_ca_); !error.empty()) return error;
  namespace ssl = boost::asio::ssl;
  try {
    auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
    ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                     ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
    ctx->set_password_callback([](std::size_t, ssl::context::password_purpose) { return std::string(); });
    const std::string chain = read_config_file(cert_, "certificate");
    const std::string key = read_config_file(key_, "private key");
    ctx->use_certificate_chain(boost::asio::buffer(chain));
    ctx->use_private_key(boost::asio::buffer(key), ssl::context::pem);
    if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
      ERR_clear_error();
      return key_ + ": this private key is not the key of " + cert_ + "'s certificate";
    }
    if (!client_ca_.empty()) {
      const std::string cas = read_config_file(client_ca_, "CA certificate");
      ctx->add_certificate_authority(boost::asio::buffer(cas));
      ctx->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
    }
    SSL_CTX_set_alpn_select_cb(ctx->native_handle(), select_h2, nullptr);
    current_ = std::move(ctx);
  } catch (const std::exception& e) {
    ERR_clear_error();
    return cert_ + ": " + e.what();
  }
  // The files as they were when read: a change during the read is seen at the next look.
  loaded_ = before;
  ++reloads_;
  return {};
}

std::string TlsFiles::reload_if_changed() {
  const std::vector<Stamp> now = stamps();
  if (now == loaded_ || now == failed_) return {};  // unchanged, or already found broken as they are
  std::string error = load();
  failed_ = error.empty() ? std::vector<Stamp>{} : now;
  return error;
}

}  // namespace tollgate::rls
