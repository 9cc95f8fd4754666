// Writes the seed corpus of every fuzz target into tests/fuzz/corpus/<target>/: real gossip
// messages from the real encoder (heartbeats, batches, relays, digests, a split digest, sealed
// with fuzz::test_keys() for the keyed targets), real client API requests framed by
// api::append_frame, and the repository's own config, rules and peers files.
//
// Usage: build/tests/fuzz/tollgate-fuzz-corpus REPO_ROOT
// Each target's directory is emptied first, so the output is exactly what this program makes.
// Every seed stays under 4 KiB (libFuzzer's default -max_len is 4096).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "api/framing.h"
#include "codec/codec.h"
#include "daemon/daemon_options.h"
#include "gossip_contract.h"
#include "support/h2_client.h"
#include "tollgate/v1/api.pb.h"

namespace {

namespace fs = std::filesystem;
namespace pb = ::tollgate::v1::api;
using namespace tollgate;

fs::path g_corpus;

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "tollgate-fuzz-corpus: %s\n", why.c_str());
  std::exit(1);
}

void start_target(const std::string& target) {
  const fs::path dir = g_corpus / target;
  fs::create_directories(dir);
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) fs::remove(e.path());
}

void write_seed(const std::string& target, const std::string& name, const std::string& bytes) {
  if (bytes.size() >= 4096) die(target + "/" + name + ": " + std::to_string(bytes.size()) + " bytes, over 4 KiB");
  std::ofstream out(g_corpus / target / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) die("cannot write " + (g_corpus / target / name).string());
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) die("cannot read " + path.string());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// --- Gossip ---------------------------------------------------------------------------------

BatchPtr batch(const std::string& origin, uint64_t incarnation, uint64_t seq, std::vector<ConsumptionEntry> entries) {
  return std::make_shared<const Batch>(Batch{origin, incarnation, seq, std::move(entries)});
}

SeenWindow window(uint64_t incarnation, uint64_t watermark, std::array<uint64_t, 4> above = {}) {
  SeenWindow w;
  w.incarnation = incarnation;
  w.watermark = watermark;
  w.above = above;
  return w;
}

GossipMessage header(const std::string& id, uint64_t incarnation, const std::string& address) {
  GossipMessage m;
  m.sender = id;
  m.sender_incarnation = incarnation;
  m.sender_address = address;
  return m;
}

constexpr uint64_t kIncA = 1'718'000'000'000'001ULL;  // incarnations as the daemon derives them
constexpr uint64_t kIncB = 1'718'000'000'400'002ULL;
constexpr uint64_t kIncC = 1'718'000'003'000'003ULL;

struct NamedMessage {
  std::string name;
  GossipMessage message;
};

std::vector<NamedMessage> gossip_messages() {
  std::vector<NamedMessage> out;

  GossipMessage heartbeat = header("node-a", kIncA, "127.0.0.1:7101");
  heartbeat.members = {{"node-a", "127.0.0.1:7101", kIncA, 812, false},
                       {"node-b", "127.0.0.1:7102", kIncB, 790, false},
                       {"node-c", "127.0.0.1:7103", kIncC, 15, false}};
  out.push_back({"heartbeat", heartbeat});

  GossipMessage round = header("node-b", kIncB, "127.0.0.1:7102");
  round.batches = {batch("node-b", kIncB, 57, {{"api:login:bob", 1}, {"api:search:alice", 3}, {"tenant:42", 10}})};
  out.push_back({"batch", round});

  GossipMessage relay = header("node-c", kIncC, "127.0.0.1:7103");
  relay.batches = {batch("node-a", kIncA, 1203, {{"api:login:bob", 2}}),
                   batch("node-b", kIncB, 57, {{"api:login:bob", 1}, {"tenant:42", 10}}),
                   batch("node-c", kIncC, 9, {{"", 1}, {"upload:big", 1'000'000}})};
  out.push_back({"relay", relay});

  // To a contact: the sender's own batches with its stint (relay repair), and a row request.
  GossipMessage to_contact = header("node-a", kIncA, "127.0.0.1:7101");
  to_contact.relay_groups = 4;
  to_contact.relay = true;
  to_contact.relay_since = 1190;
  to_contact.relay_through = 1204;
  to_contact.batches = {batch("node-a", kIncA, 1204, {{"api:login:bob", 2}})};
  out.push_back({"to-contact", to_contact});
  GossipMessage row_request = header("node-b", kIncB, "127.0.0.1:7102");
  row_request.row_wanted = "node-c";
  out.push_back({"row-request", row_request});

  Digest digest;
  digest.origins = {{"node-a", window(kIncA, 1200, {0b1011, 0, 0, 0}), window(kIncA - 7'000'000, 88)},
                    {"node-b", window(kIncB, 57), SeenWindow{}},
                    {"node-c", window(kIncC, 0, {0, 0, 0, 1ULL << 63}), SeenWindow{}}};
  GossipMessage push_pull = header("node-a", kIncA, "127.0.0.1:7101");
  push_pull.digest = digest;
  push_pull.digest_reply_wanted = true;
  out.push_back({"push-pull-request", push_pull});

  GossipMessage repair = header("node-b", kIncB, "127.0.0.1:7102");
  repair.digest = digest;
  repair.batches = {batch("node-c", kIncC, 10, {{"api:login:carol", 1}})};
  out.push_back({"push-pull-answer", repair});

  GossipMessage empty_digest = header("node-c", kIncC, "127.0.0.1:7103");
  empty_digest.digest = Digest{};
  empty_digest.digest_reply_wanted = true;
  out.push_back({"empty-digest", empty_digest});

  GossipMessage leaving = header("node-c", kIncC, "127.0.0.1:7103");
  leaving.leaving = true;
  leaving.members = {{"node-c", "127.0.0.1:7103", kIncC, 16, true}};
  out.push_back({"leaving", leaving});

  // A round sealed at the largest batch a 1400-byte datagram carries (split_for_sealing).
  std::vector<ConsumptionEntry> entries;
  for (int i = 0; i < 60; ++i) entries.push_back({"user:" + std::to_string(100000 + i * 7919), 1 + i % 5});
  const auto runs = split_for_sealing(entries, "node-a", max_batch_bytes_for(kDefaultMaxDatagramBytes));
  GossipMessage sealed = header("node-a", kIncA, "127.0.0.1:7101");
  sealed.batches = {batch("node-a", kIncA, 1204, runs.front())};
  out.push_back({"full-batch", sealed});

  // Ids and addresses at their limits, as the encoder allows them.
  GossipMessage limits =
      header(std::string(kMaxSenderIdBytes, 'n'), UINT64_MAX, std::string(kMaxAddressBytes - 5, 'h') + ":7946");
  limits.batches = {
      batch(std::string(kMaxNodeIdBytes, 'o'), UINT64_MAX, UINT64_MAX, {{std::string(kMaxKeyBytes, 'k'), INT64_MAX}})};
  out.push_back({"limits", limits});

  GossipMessage mesh = header("10.0.1.17:7946", kIncA, "10.0.1.17:7946");  // node id defaults to the bind address
  mesh.batches = {batch("10.0.1.17:7946", kIncA, 1, {{"api:login:bob", 1}})};
  mesh.members = {{"10.0.1.18:7946", "10.0.1.18:7946", kIncB, 3, false},
                  {"[fd00::19]:7946", "[fd00::19]:7946", kIncC, 0, false}};
  out.push_back({"mesh-ipv6", mesh});

  // Top-K units (minor 8): a node's heaviest denied keys of a rule, and an RLS rule's tokens.
  GossipMessage tops = header("node-b", kIncB, "127.0.0.1:7102");
  auto unit = std::make_shared<Batch>(Batch{"node-b", kIncB, 58, {}, {}});
  unit->top = std::make_shared<const TopUnit>(
      TopUnit{"user:*", 0, 940, 3, 3000, {{"user:mallory", 700, 0}, {"user:bob", 41, 3}, {"user:carol", 41, 0}}});
  auto rls_unit = std::make_shared<Batch>(Batch{"node-b", kIncB, 59, {}, {}});
  rls_unit->top = std::make_shared<const TopUnit>(
      TopUnit{"rls:web.path_/a", 1, 12, 0, 3000, {{"\x1eweb\x1fpath\x01/a\x1d", 12, 0}}});
  tops.batches = {unit, rls_unit};
  out.push_back({"top-units", tops});
  return out;
}

// A digest of many origins: at kMinDatagramBytes it travels in several range parts.
GossipMessage big_digest() {
  GossipMessage m = header("node-a", kIncA, "127.0.0.1:7101");
  Digest d;
  for (int i = 0; i < 90; ++i) {
    char id[32];
    std::snprintf(id, sizeof id, "host-%03d.dc1.example:7946", i);
    d.origins.push_back(
        {id, window(kIncA + static_cast<uint64_t>(i), 40u + static_cast<uint64_t>(i), {uint64_t(i), 0, 0, 0}),
         SeenWindow{}});
  }
  m.digest = d;
  m.digest_reply_wanted = true;
  return m;
}

std::string be32(uint32_t n) {
  return {static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8), static_cast<char>(n)};
}

void gossip_corpora() {
  const ClusterKeys none;
  const ClusterKeys& key = fuzz::test_keys();
  const std::vector<NamedMessage> messages = gossip_messages();

  start_target("gossip_datagram");
  start_target("gossip_datagram_keyed");
  start_target("gossip_payload");
  for (const NamedMessage& m : messages) {
    write_seed("gossip_datagram", m.name, encode_datagrams(m.message, none).front());
    const std::string sealed = encode_datagrams(m.message, key).front();
    write_seed("gossip_datagram_keyed", m.name, sealed);
    write_seed("gossip_payload", m.name, fuzz::payload_of(sealed));
  }
  // A keyless node accepts signed messages too.
  write_seed("gossip_datagram", "signed-batch", encode_datagrams(messages[1].message, key).front());
  const std::vector<std::string> parts = encode_datagrams(big_digest(), key, kMinDatagramBytes);
  if (parts.size() < 3) die("the big digest should take at least three datagrams");
  for (size_t i = 0; i < 3; ++i) {
    const std::string name = "digest-part-" + std::to_string(i);
    write_seed("gossip_datagram_keyed", name, parts[i]);
    write_seed("gossip_payload", name, fuzz::payload_of(parts[i]));
  }
  write_seed("gossip_datagram", "digest-part-last", encode_datagrams(big_digest(), none, kMinDatagramBytes).back());

  // TCP: StreamInput's flags byte (bit 3 keyed, bits 4-5 the frame limit), chunk lengths, then
  // the frames as a connection carries them.
  start_target("gossip_frames");
  auto frames = [](const GossipMessage& m, const ClusterKeys& keys, size_t max = kDefaultMaxFrameBytes) {
    std::string s;
    for (const std::string& f : encode_frames(m, keys, max)) s += f;
    return s;
  };
  write_seed("gossip_frames", "batch", std::string(1, '\x00') + frames(messages[1].message, none));
  write_seed("gossip_frames", "heartbeat-keyed", std::string(1, '\x08') + frames(messages[0].message, key));
  write_seed("gossip_frames", "relay-keyed", std::string(1, '\x08') + frames(messages[2].message, key));
  write_seed("gossip_frames", "push-pull-keyed", std::string(1, '\x08') + frames(messages[3].message, key));
  write_seed("gossip_frames", "leaving", std::string(1, '\x00') + frames(messages[6].message, none));
  // Three messages back to back, read in pieces of 1, 3 and 17 bytes and then the rest.
  write_seed("gossip_frames", "pipelined-split",
             std::string("\x0b\x01\x03\x11", 4) + frames(messages[0].message, key) + frames(messages[1].message, key) +
                 frames(messages[4].message, key));
  // The big digest as frames of at most kMinDatagramBytes, with that limit (bits 4-5 = 1).
  write_seed("gossip_frames", "digest-parts",
             std::string(1, '\x18') + frames(big_digest(), key, kMinDatagramBytes).substr(0, 4000));
  write_seed("gossip_frames", "oversize-prefix", std::string(1, '\x00') + be32(0x7fffffff) + "junk");
  const std::string one = frames(messages[2].message, none);
  write_seed("gossip_frames", "half-frame", std::string(1, '\x00') + one.substr(0, one.size() / 2));
  write_seed("gossip_frames", "limit-256-split",
             std::string("\x22\x05\x40", 3) + frames(messages[1].message, none) + one);
}

// --- Client API -------------------------------------------------------------------------------

pb::Request request(uint64_t id) {
  pb::Request r;
  r.set_version(tollgate::api::kApiVersion);
  r.set_id(id);
  return r;
}

std::string framed(const pb::Request& r) {
  std::string out;
  if (!tollgate::api::append_frame(r, tollgate::api::kDefaultMaxFrameBytes, out)) die("a request does not frame");
  return out;
}

void api_corpus() {
  start_target("api_frames");
  const std::string plain(1, '\x00');

  pb::Request check = request(1);
  pb::Check* c = check.mutable_check()->add_checks();
  c->set_key("api:login:bob");
  c->set_cost(1);
  write_seed("api_frames", "check", plain + framed(check));

  pb::Request batch = request(2);
  for (const char* key : {"api:login:bob", "api:search:alice", "tenant:42", "unlimited:key"}) {
    pb::Check* b = batch.mutable_check()->add_checks();
    b->set_key(key);
    b->set_cost(3);
  }
  write_seed("api_frames", "check-batch", plain + framed(batch));

  pb::Request query = request(3);
  query.mutable_check()->add_checks()->set_key("api:login:bob");  // cost 0: ask without taking
  write_seed("api_frames", "check-query", plain + framed(query));

  pb::Request members = request(4);
  members.mutable_members();
  write_seed("api_frames", "members", plain + framed(members));

  pb::Request stats = request(5);
  stats.mutable_stats();
  write_seed("api_frames", "stats", plain + framed(stats));

  pb::Request faults = request(6);
  faults.mutable_faults()->add_drop_to("node-b");
  faults.mutable_faults()->add_drop_from("node-c");
  faults.mutable_faults()->set_loss(0.2);
  faults.mutable_faults()->set_delay_ms(50);
  faults.mutable_faults()->set_duplicate(0.1);
  faults.mutable_faults()->set_jitter_ms(20);
  write_seed("api_frames", "faults", plain + framed(faults));

  pb::Request clear = request(7);
  clear.mutable_faults();
  write_seed("api_frames", "faults-clear", plain + framed(clear));

  // Pipelined, read in pieces of 2, 1 and 9 bytes and then the rest.
  write_seed("api_frames", "pipelined-split",
             std::string("\x03\x02\x01\x09", 4) + framed(check) + framed(members) + framed(stats) + framed(batch));

  pb::Request future = request(8);
  future.set_version(2);
  future.mutable_stats();
  write_seed("api_frames", "version-2", plain + framed(future));

  write_seed("api_frames", "no-body", plain + framed(request(9)));
  write_seed("api_frames", "length-2gib", plain + be32(0x80000000u) + "garbage");
  const std::string f = framed(batch);
  write_seed("api_frames", "half-frame", plain + f.substr(0, f.size() / 2));

  pb::Request long_key = request(10);
  long_key.mutable_check()->add_checks()->set_key(std::string(300, 'k'));
  write_seed("api_frames", "long-key-small-limit", std::string(1, '\x08') + framed(check) + framed(long_key));
}

// --- Files ------------------------------------------------------------------------------------

void file_corpora(const fs::path& root) {
  start_target("daemon_config");
  write_seed("daemon_config", "tollgate.yaml", read_file(root / "config/tollgate.yaml"));
  for (const char* dir : {"local-static", "local-heartbeat"}) {
    for (const char* node : {"node-a", "node-b", "node-c"}) {
      write_seed("daemon_config", std::string(dir) + "-" + node + ".yaml",
                 read_file(root / "config" / dir / (std::string(node) + ".yaml")));
    }
  }
  // Every setting once, with values that pass validation (the key file must exist).
  write_seed("daemon_config", "every-setting.yaml",
             "node-id: web-17\nbind: \"[fd00::17]:7946\"\nlisten: [unix:/tmp/t.sock, tcp:127.0.0.1:7199]\n"
             "rules: config/rules.yaml\nmode: mesh\ntransport: tcp\nmembership: heartbeat\n"
             "seeds: [\"10.0.1.18:7946\", \"10.0.1.19:7946\"]\ninterval: 20ms\nfanout: 4\n"
             "partition-policy: proportional\ncluster-key-file: /dev/null\nlog-level: warn\n"
             "max-datagram: 1232\nfail-after: 1s\nforget-after: 15s\nprobe-interval: 500ms\n"
             "push-pull-interval: 2s\ngossip-peer-rate: 1048576\nmax-keys: 5000\nincarnation: 42\n");

  start_target("rules_file");
  write_seed("rules_file", "rules.yaml", read_file(root / "config/rules.yaml"));
  write_seed("rules_file", "readme-example.yaml",
             "rules:\n  - match: \"api:login:*\"\n    rate: 30/min\n    burst: 5\n    max_debt: 5\n"
             "default:\n  rate: 100/s\n  burst: 100\n");
  write_seed("rules_file", "exact-and-globs.yaml",
             "rules:\n  - match: \"tenant:42\"\n    rate: 1000/s\n    burst: 2000\n"
             "  - match: \"tenant:*\"\n    rate: 100/s\n    burst: 100\n    max_debt: 0\n"
             "  - match: \"*:upload\"\n    rate: 10/h\n    burst: 1\n");
  write_seed("rules_file", "default-only.yaml", "default:\n  rate: 1000000000000/s\n  burst: 1000000000000\n");
  write_seed("rules_file", "flow-style.yaml", "{rules: [{match: \"a*b*c\", rate: 5/s, burst: 10}], default: null}\n");
  write_seed("rules_file", "empty.yaml", "");

  start_target("rls_config");
  write_seed("rls_config", "example.yaml", read_file(root / "config/rls/example.yaml"));
  write_seed("rls_config", "nested-and-replaces.yaml",
             "domain: d\ndescriptors:\n  - key: a\n    value: x\n    descriptors:\n      - key: b\n"
             "        rate_limit: {unit: minute, requests_per_unit: 20, name: n}\n  - key: c\n"
             "    value: pre*\n    share_threshold: true\n    rate_limit: {unit: hour, requests_per_unit: 10}\n"
             "  - key: vip\n    rate_limit: {unit: second, requests_per_unit: 5, replaces: [{name: n}], burst: 7,"
             " max_debt: 0, charge_when_over: true}\n  - key: free\n    rate_limit: {unlimited: true}\n");
  write_seed("rls_config", "concurrency.yaml",
             "domain: llm\ndescriptors:\n  - key: api_key\n    concurrency: 4\n    lease_ttl: 5m\n"
             "  - key: tenant\n    concurrency: 10\n    rate_limit: {unit: minute, requests_per_unit: 100}\n");
  write_seed("rls_config", "empty.yaml", "");

  start_target("peers_file");
  write_seed("peers_file", "peers.txt", read_file(root / "config/local-static/peers.txt"));
  write_seed("peers_file", "production.txt",
             "# id     gossip address\nweb-17   10.0.1.17:7946\nweb-18   10.0.1.18:7946   # rack 2\n"
             "web-19\t10.0.1.19:7946\n\n[fd00::20]:7946 [fd00::20]:7946\n");
  write_seed("peers_file", "crlf.txt", "node-a 127.0.0.1:7101\r\nnode-b 127.0.0.1:7102\r\n");
  std::string many;
  for (int i = 0; i < 40; ++i)
    many += "host-" + std::to_string(i) + " 10.0." + std::to_string(i / 8) + "." + std::to_string(i) + ":7946\n";
  write_seed("peers_file", "forty.txt", many);
}

}  // namespace

// node_state: step sequences (opcode, argument) in the mixes node_state_fuzz.cc reads: rounds,
// checks, deliveries in order and out of it, losses, replays, time jumps, restarts and forgeries,
// for each membership and dissemination mode.
void node_state_corpus() {
  fs::create_directories(g_corpus / "node_state");
  std::mt19937 rng(15);
  struct Mix {
    const char* name;
    uint8_t flags;                // bit 0: heartbeat membership; bit 1: gossip dissemination
    std::vector<double> weights;  // per opcode 0..8
  };
  const std::vector<Mix> mixes = {
      {"static_mesh", 0, {6, 6, 4, 10, 3, 1, 4, 1, 1}},          {"heartbeat_mesh", 1, {6, 6, 4, 10, 3, 1, 4, 1, 1}},
      {"static_gossip", 2, {6, 6, 4, 10, 3, 1, 4, 1, 1}},        {"heartbeat_gossip", 3, {6, 6, 4, 10, 3, 1, 4, 1, 1}},
      {"replays_and_restarts", 1, {4, 4, 3, 8, 2, 1, 10, 2, 3}}, {"lossy_time_jumps", 0, {5, 5, 4, 6, 4, 6, 3, 3, 1}},
  };
  for (const Mix& mix : mixes) {
    std::discrete_distribution<int> op(mix.weights.begin(), mix.weights.end());
    std::uniform_int_distribution<int> byte(0, 255);
    std::string seed(1, char(mix.flags));
    for (int step = 0; step < 600; ++step) {
      const int o = op(rng);
      seed += char(o);
      seed += char(o == 7 ? byte(rng) % 8 : byte(rng));  // time jumps of at most 3.5 s
    }
    write_seed("node_state", mix.name, seed);
  }
}

// --- Dictionaries ----------------------------------------------------------------------------

// tollgated's config file: every key of the settings table (daemon/daemon_settings.cc) and the
// choices its rows list, so that a new setting reaches the fuzzer without anyone editing a list;
// then the shapes values take.
void daemon_config_dict(const fs::path& root) {
  std::string dict =
      "# libFuzzer dictionary for tollgated --config, written by tollgate-fuzz-corpus from the settings table\n"
      "# (src/daemon/daemon_settings.cc): do not edit; regenerate (tests/fuzz/README.md).\n";
  std::set<std::string> choices;
  for (const DaemonSetting& row : daemon_settings()) {
    dict += "\"" + row.flag + ": \"\n";
    const std::string_view t = row.type_name;
    if (t.size() < 2 || t.front() != '{' || t.back() != '}') continue;
    for (size_t start = 1; start < t.size();) {
      const size_t end = std::min(t.find(',', start), t.size() - 1);
      choices.insert(std::string(t.substr(start, end - start)));
      start = end + 1;
    }
  }
  for (const std::string& c : choices) dict += "\"" + c + "\"\n";
  for (const char* shape : {"ns",         "us",      "ms",       "s",     "m",     "h",     "K",    "M",
                            "G",          "auto",    "none",     "true",  "false", "unix:", "tcp:", "127.0.0.1:7946",
                            "[::1]:7946", "http://", "https://", "- ",    "[",     "]",     ",",    "{",
                            "}",          "&a",      "*a",       "!!str", "'",     "\\\"",  "#"}) {
    dict += "\"" + std::string(shape) + "\"\n";
  }
  std::ofstream out(root / "tests/fuzz/dicts/daemon_config.dict", std::ios::trunc);
  out << dict;
  if (!out) die("cannot write tests/fuzz/dicts/daemon_config.dict");
}

// --- The rate limit service's own HTTP/2 ------------------------------------------------------

// What an nghttp2 client session writes after its preface (the target sends the preface itself),
// behind a StreamInput header of `flags` and `chunks`.
std::string h2_seed(tollgate::testing::H2Client& client, uint8_t flags = 0, std::vector<uint8_t> chunks = {}) {
  const std::string bytes = client.output();
  constexpr size_t kPreface = 24;
  if (bytes.size() < kPreface) die("rls_h2_frames: the client wrote no preface");
  std::string seed(1, char(flags | chunks.size()));
  for (const uint8_t c : chunks) seed += char(c);
  return seed + bytes.substr(kPreface);
}

void h2_corpus() {
  using tollgate::testing::H2Client;
  constexpr std::string_view kShould = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
  const std::string message = std::string(5, '\0').replace(4, 1, 1, '\x07') +
                              "\x0a\x05"
                              "bench";
  start_target("rls_h2_frames");
  {
    H2Client c;
    c.call(kShould, message, false, {{"grpc-timeout", "20m"}});
    write_seed("rls_h2_frames", "call", h2_seed(c));
  }
  {
    H2Client c;
    c.call(kShould, message);
    c.call(kShould, message);
    write_seed("rls_h2_frames", "two-calls-held", h2_seed(c, 0x8));
  }
  {
    H2Client c;
    c.call(kShould, message);
    write_seed("rls_h2_frames", "call-failed-split", h2_seed(c, 0x10, {1, 9, 30}));
  }
  {
    H2Client c;  // HEADERS out, then each stream reset: the budget's premature closes
    std::vector<int32_t> ids;
    for (int i = 0; i < 6; ++i) ids.push_back(c.call(kShould, "", /*hold=*/true));
    std::string bytes = c.output();
    for (const int32_t id : ids) c.reset(id);
    bytes += c.output();
    write_seed("rls_h2_frames", "rapid-reset", std::string(1, '\0') + bytes.substr(24));
  }
  {
    H2Client c;
    c.call("/grpc.health.v1.Health/Check", message);
    c.call("/envoy.service.ratelimit.v3.RateLimitService/Other", message);
    c.call(kShould, message + message);
    c.call(kShould, "");
    write_seed("rls_h2_frames", "refusals", h2_seed(c));
  }
  {
    H2Client c;  // two health Watches, answered streaming, one cancelled in a later chunk
    c.call("/grpc.health.v1.Health/Watch", std::string(5, '\0'));
    const int32_t cancelled = c.call("/grpc.health.v1.Health/Watch", std::string(5, '\0'));
    std::string bytes = c.output();
    const size_t split = bytes.size() - 24;
    c.reset(cancelled);
    bytes += c.output();
    write_seed("rls_h2_frames", "watches",
               std::string(1, char(1)) + char(std::min<size_t>(split, 255)) + bytes.substr(24));
  }
}

int main(int argc, char** argv) {
  if (argc != 2) die("usage: tollgate-fuzz-corpus REPO_ROOT");
  const fs::path root = argv[1];
  if (!fs::exists(root / "tests/fuzz/CMakeLists.txt")) die(root.string() + " is not the repository root");
  g_corpus = root / "tests/fuzz/corpus";
  gossip_corpora();
  api_corpus();
  file_corpora(root);
  node_state_corpus();
  h2_corpus();
  fs::create_directories(root / "tests/fuzz/dicts");
  daemon_config_dict(root);
  std::printf("seed corpus written to %s\n", g_corpus.c_str());
  return 0;
}
