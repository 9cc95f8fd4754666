#include "state/snapshot.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "codec/mac.h"
#include "tollgate/config_error.h"
#include "tollgate/state/v1/state.pb.h"
#include "util/big_endian.h"

namespace tollgate::state {
namespace {

namespace pb = ::tollgate::state::v1;

constexpr std::string_view kMagic{"TGSTATE\0", 8};
constexpr size_t kMacBytes = codec_internal::kMacBytes;
constexpr size_t kHeaderBytes = kMagic.size() + 4 + kMacBytes;

// HMAC-SHA256(key, "tollgate-state" 0x00 | be32 version | payload): another context than
// gossip's, so a MAC made for one is never valid for the other.
codec_internal::Mac state_mac(std::string_view key, uint32_t version, std::string_view payload) {
  char v[4];
  store_be32(version, v);
  return codec_internal::hmac_sha256(key, {std::string_view("tollgate-state\0", 15), std::string_view(v, 4), payload});
}

std::vector<std::string> keys_of(const ClusterKeys& keys) {
  return keys.empty() ? std::vector<std::string>{""} : keys.keys();
}

void to_proto(const SeenWindow& w, pb::SeenWindow& out) {
  out.set_incarnation(w.incarnation);
  out.set_watermark(w.watermark);
  for (uint64_t word : w.above) out.add_above(word);
}

SeenWindow from_proto(const pb::SeenWindow& in) {
  SeenWindow w;
  w.incarnation = in.incarnation();
  w.watermark = in.watermark();
  for (int i = 0; i < in.above_size() && size_t(i) < w.above.size(); ++i) w.above[size_t(i)] = in.above(i);
  return w;
}

}  // namespace

std::string encode(const NodeState& s, int64_t written_unix_ns, const ClusterKeys& keys) {
  pb::Snapshot m;
  m.set_node_id(s.node_id);
  m.set_incarnation(s.incarnation);
  m.set_written_unix_ns(written_unix_ns);
  m.mutable_balances()->Reserve(int(s.balances.size()));
  for (const auto& [key, balance] : s.balances) {
    pb::Balance* b = m.add_balances();
    b->set_key(key);
    b->set_balance_microtokens(balance);
  }
  for (const OriginDigest& o : s.positions.origins) {
    pb::OriginPosition* p = m.add_positions();
    p->set_origin(o.origin);
    to_proto(o.current, *p->mutable_current());
    to_proto(o.previous, *p->mutable_previous());
  }
  for (const ResetMark& r : s.resets) {
    pb::ResetEpoch* e = m.add_resets();
    e->set_key(r.key);
    e->set_epoch(r.epoch);
  }
  // Written as the reader will take it: never a file the next start refuses for its size.
  const size_t payload_bytes = m.ByteSizeLong();
  if (payload_bytes > kMaxStateFileBytes - kHeaderBytes) {
    throw std::length_error("the state is " + std::to_string(payload_bytes) + " bytes, more than a state file holds (" +
                            std::to_string(kMaxStateFileBytes) + "): lower --max-keys");
  }
  // The message serialized once, after the header's room; the MAC over it in place.
  std::string out(kHeaderBytes, '\0');
  out.replace(0, kMagic.size(), kMagic);
  store_be32(kFormatVersion, out.data() + kMagic.size());
  if (!m.AppendToString(&out)) throw std::runtime_error("the state cannot be serialized");
  const codec_internal::Mac mac =
      state_mac(keys_of(keys).front(), kFormatVersion, std::string_view(out).substr(kHeaderBytes));
  out.replace(kMagic.size() + 4, kMacBytes, reinterpret_cast<const char*>(mac.data()), kMacBytes);
  return out;
}

Loaded decode(std::string_view bytes, const ClusterKeys& keys, const std::string& path) {
  auto fail = [&](const std::string& why) { throw ConfigError(path, 0, 0, why); };
  if (bytes.size() < kHeaderBytes || bytes.substr(0, kMagic.size()) != kMagic) {
    fail("not a tollgate state file (it does not start with TGSTATE); move it aside to start without it");
  }
  const uint32_t version = load_be32(bytes.data() + kMagic.size());
  if (version != kFormatVersion) {
    fail("state format version " + std::to_string(version) + ", this tollgated reads version " +
         std::to_string(kFormatVersion) + "; move it aside to start without it");
  }
  const std::string_view mac = bytes.substr(kMagic.size() + 4, kMacBytes);
  const std::string_view payload = bytes.substr(kHeaderBytes);
  bool verified = false;
  for (const std::string& key : keys_of(keys)) {
    const codec_internal::Mac expected = state_mac(key, version, payload);
    verified = verified || CRYPTO_memcmp(expected.data(), mac.data(), kMacBytes) == 0;
  }
  if (!verified) {
    fail(
        "its checksum does not verify: it is truncated or corrupted, or was written under another cluster key "
        "(or without one); nothing of it was used. Move it aside to start without it");
  }
  pb::Snapshot m;
  if (!m.ParseFromArray(payload.data(), int(payload.size())))
    fail("its contents cannot be read; nothing of it was used");
  Loaded out;
  out.written_unix_ns = m.written_unix_ns();
  out.state.node_id = m.node_id();
  out.state.incarnation = m.incarnation();
  out.state.balances.reserve(size_t(m.balances_size()));
  for (const pb::Balance& b : m.balances()) out.state.balances.emplace_back(b.key(), b.balance_microtokens());
  for (const pb::OriginPosition& p : m.positions()) {
    out.state.positions.origins.push_back({p.origin(), from_proto(p.current()), from_proto(p.previous())});
  }
  for (const pb::ResetEpoch& e : m.resets()) {
    if (e.epoch() > 0) out.state.resets.push_back({e.key(), e.epoch()});
  }
  return out;
}

std::optional<std::string> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw ConfigError(path, 0, 0, std::string("cannot read the state file: ") + std::strerror(errno));
  }
  struct stat st {};
  std::string bytes;
  std::string error;
  if (::fstat(fd, &st) != 0) {
    error = std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    error = "not a regular file";
  } else if (size_t(st.st_size) > kMaxStateFileBytes) {
    error = std::to_string(st.st_size) + " bytes, more than a state file holds (" + std::to_string(kMaxStateFileBytes) +
            ")";
  } else {
    bytes.resize(size_t(st.st_size));
    size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error = n == 0 ? "shorter than its size" : std::strerror(errno);
        break;
      }
      got += size_t(n);
    }
  }
  ::close(fd);
  if (!error.empty()) throw ConfigError(path, 0, 0, "cannot read the state file: " + error);
  return bytes;
}

}  // namespace tollgate::state
