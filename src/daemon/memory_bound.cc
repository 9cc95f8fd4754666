#include "daemon/memory_bound.h"

#include <algorithm>
#include <fstream>

#include "api/api_server.h"
#include "api/connection.h"
#include "api/framing.h"
#include "config/peers_file.h"
#include "core/ledger.h"
#include "daemon/daemon_options.h"
#include "host/node_host.h"
#include "http/http_server.h"
#include "rls/rls_server.h"
#include "tcp_transport.h"

namespace tollgate {
namespace {

constexpr uint64_t kMiB = 1 << 20;
// The process before any client: code, libraries (gRPC, protobuf, OpenSSL), thread stacks
// touched, the allocator's arenas. An idle tollgated with every door open measures 19-21 MiB.
constexpr uint64_t kBaseBytes = 48 * kMiB;
// One answer beyond a budget: a 1,000-check batch in JSON is ~235 KB, a members list ~100 bytes
// a member.
constexpr uint64_t kLargestAnswerBytes = 1 * kMiB;

}  // namespace

std::vector<MemoryPart> memory_bound(const DaemonOptions& o) {
  const NodeHostOptions host = node_host_options(o);
  // The key table's options as the node sets them (NodeHost::node_options, then Node::Node).
  KeyTableOptions keys = NodeHost::node_options(host, 1).keys;
  keys.concurrent = host.concurrent_checks;
  if (keys.concurrent) keys.min_pending_evicted = std::max(keys.min_pending_evicted, 2 * host.early_seal_keys);
  std::vector<MemoryPart> parts;
  parts.push_back({"process", kBaseBytes, "code, libraries, threads"});
  parts.push_back({"keys", KeyTable::memory_bound(keys),
                   "--max-keys " + std::to_string(keys.max_keys) + " of up to " + std::to_string(keys.max_key_bytes) +
                       " bytes, as many evicted waiting to be sent, " + std::to_string(keys.max_remembered) +
                       " debts remembered"});
  {
    const NodeOptions node = NodeHost::node_options(host, 1);
    parts.push_back({"top-K", Node::top_memory_bound(node),
                     "--top-k " + std::to_string(node.top.capacity) + " for up to --top-rules " +
                         std::to_string(node.top.max_rules) + " rules, " + std::to_string(Node::kMaxHeldTopUnits) +
                         " members' summaries"});
    parts.push_back({"leases", Node::lease_memory_bound(node),
                     "--max-leases " + std::to_string(node.leases.max_leases) + " held here, --max-lease-rows " +
                         std::to_string(node.max_lease_rows) + " other members' counts"});
  }
  // The ledger keeps at most its retained bytes of batches, and the origins' positions.
  const LedgerOptions ledger;
  parts.push_back({"gossip", 2 * ledger.max_retained_bytes + ledger.max_origins * 256 + 8 * kMiB,
                   "batches kept for repair, " + std::to_string(ledger.max_origins) + " origins"});
  if (host.transport == TransportKind::kTcp) {
    // Inbound: each connection's frame being read; outbound: each peer's queue of frames not
    // yet written. Peers: the static file's, or 64 assumed with heartbeat membership.
    const TcpTransportOptions tcp;
    size_t peers = 64;
    std::string assumed = " (64 assumed)";
    if (host.node.membership == MembershipKind::kStatic && !host.peers_file.empty()) {
      try {
        peers = load_peers_file(host.peers_file).size();
        assumed.clear();
      } catch (const std::exception&) {
        // The host reports a broken peers file, with its line; 64 stands here.
      }
    }
    parts.push_back(
        {"TCP gossip", tcp.max_inbound_connections * (tcp.max_frame_bytes + 16 * 1024) + peers * tcp.max_queue_bytes,
         std::to_string(tcp.max_inbound_connections) + " inbound connections, " + mebibytes(tcp.max_queue_bytes) +
             " queued for each of " + std::to_string(peers) + " peers" + assumed});
  }
  {
    // A connection: its own object (the 16 KiB read buffer inside), a frame being read, and the
    // answer buffers an idle one keeps; all their answers together: the budget (strings grow by
    // doubling: twice) and one answer more per thread.
    const api::ApiServerOptions defaults;
    const size_t threads = std::max<size_t>(o.threads, 1);
    const uint64_t per_connection = sizeof(api::Connection) + defaults.max_frame_bytes + 16 * 1024 +
                                    2 * api::Connection::kKeepOutputCapacity + 2048;
    parts.push_back(
        {"client API",
         o.api_max_connections * per_connection + 2 * defaults.max_output_bytes + threads * kLargestAnswerBytes,
         "--api-max-connections " + std::to_string(o.api_max_connections)});
  }
  auto http_part = [&](const std::string& name, size_t connections) {
    const http::HttpServerOptions defaults;
    // Read buffer (headers and one read), a body, and an answer being written.
    const uint64_t per_connection =
        defaults.max_header_bytes + 64 * 1024 + defaults.max_body_bytes + kLargestAnswerBytes / 4 + 4096;
    parts.push_back({name, connections * per_connection + defaults.max_pending * 512,
                     "--http-max-connections " + std::to_string(connections)});
  };
  if (!o.http_listen.empty()) http_part("HTTP", o.http_max_connections);
  if (!o.metrics_listen.empty()) http_part("metrics HTTP", o.http_max_connections);
  if (!o.rls_listen.empty() && o.rls_native) {
    const rls::RlsServerOptions defaults;
    // --rls-server native: per connection a read (16 KiB), nghttp2's session (its HPACK tables,
    // 100 streams of a few hundred bytes, the answers one read asked for: 64 KiB kept) and
    // OpenSSL's (records both ways, 64 KiB kept); across connections the request bytes held
    // until their message is whole (H2SessionOptions).
    const uint64_t per_connection = 16 * 1024 + 64 * 1024 + 64 * 1024;
    parts.push_back({"Envoy RLS", o.rls_max_connections * per_connection + defaults.max_pending_bytes,
                     "native: --rls-max-connections " + std::to_string(o.rls_max_connections) + ", " +
                         mebibytes(defaults.max_pending_bytes) + " of request bytes held"});
  } else if (!o.rls_listen.empty()) {
    const rls::RlsServerOptions defaults;
    // gRPC's buffers are capped by its resource quota; the calls queued for the node hold their
    // requests (parsed: about twice their serialized bytes, which the queue caps) and a job each.
    // The connection gate holds a few dozen bytes a connection (connection_gate.h); 1 KiB is kept.
    const uint64_t queued = checks_from_any_thread(o) ? 0 : 2 * defaults.max_pending_bytes + o.rls_max_pending * 512;
    parts.push_back({"Envoy RLS", defaults.memory_quota_bytes + queued + o.rls_max_connections * 1024,
                     "gRPC's quota, " + mebibytes(defaults.max_pending_bytes) + " of queued requests, " +
                         "--rls-max-connections " + std::to_string(o.rls_max_connections)});
  }
  return parts;
}

uint64_t total_bytes(const std::vector<MemoryPart>& parts) {
  uint64_t total = 0;
  for (const MemoryPart& p : parts) total += p.bytes;
  return total;
}

std::string mebibytes(uint64_t bytes) { return std::to_string((bytes + kMiB - 1) / kMiB) + " MiB"; }

std::string describe(const std::vector<MemoryPart>& parts) {
  std::string out = mebibytes(total_bytes(parts)) + ":";
  for (size_t i = 0; i < parts.size(); ++i) {
    out += (i ? ", " : " ") + parts[i].name + " " + mebibytes(parts[i].bytes) + " (" + parts[i].from + ")";
  }
  return out;
}

std::optional<uint64_t> cgroup_memory_max(const std::string& proc_cgroup, const std::string& cgroup_root) {
  std::ifstream in(proc_cgroup);
  std::string line, path;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) path = line.substr(3);  // cgroup v2: "0::/system.slice/x.service"
  }
  if (path.empty()) return std::nullopt;
  // The tightest limit on the way up: a slice's limit holds its services too.
  std::optional<uint64_t> tightest;
  while (!path.empty() && path != "/") {
    std::ifstream max(cgroup_root + path + "/memory.max");
    std::string value, why;
    if (max >> value && value != "max") {
      if (auto bytes = parse_memory_size(value, &why)) tightest = tightest ? std::min(*tightest, *bytes) : *bytes;
    }
    path.resize(path.rfind('/'));
  }
  return tightest;
}

std::optional<uint64_t> parse_memory_size(const std::string& text, std::string* why) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const std::string unit = text.substr(digits);
  uint64_t scale = 0;
  if (unit.empty()) scale = 1;
  if (unit == "K" || unit == "KiB") scale = uint64_t{1} << 10;
  if (unit == "M" || unit == "MiB") scale = uint64_t{1} << 20;
  if (unit == "G" || unit == "GiB") scale = uint64_t{1} << 30;
  if (digits == 0 || digits > 15 || scale == 0) {
    *why = "\"" + text + "\" is not a size: a whole number of bytes, or with K, M or G (binary), e.g. 512M";
    return std::nullopt;
  }
  return std::stoull(text.substr(0, digits)) * scale;
}

}  // namespace tollgate
