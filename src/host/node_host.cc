#include "host/node_host.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <random>

#include "codec/cluster_key.h"
#include "codec/codec.h"
#include "config/content_version.h"
#include "config/peers_file.h"
#include "config/read_file.h"
#include "fault_injection.h"
#include "state/snapshot.h"
#include "tcp_transport.h"
#include "tollgate/config_error.h"
#include "tollgate/rls_config_file.h"
#include "tollgate/rules_file.h"
#include "udp_transport.h"
#include "util/host_port.h"
#include "util/printable.h"

#include <sys/random.h>

namespace tollgate {
namespace {

uint64_t seed_from_os() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

// A restarted node must come back with a higher incarnation than its last life. Wall time is
// used for that one number only (never for buckets or failure detection); microseconds keep
// two restarts within a second distinct.
uint64_t incarnation_from_wall_clock() {
  return uint64_t(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

// The wall clock, for the one thing that must span a restart: how long the node was down.
int64_t wall_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

MonoNanos steady_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// A load asked for on the owner's thread.
struct NodeHost::LoadRequest {
  bool rules_file = false, rls = false;
  bool offered = false;  // offered_text, from offered_origin
  std::string offered_text, offered_origin;
  std::vector<std::function<void(const std::string&)>> offer_done;
  std::vector<std::function<void()>> done;
};

// What the loader thread brings back. Nothing in it touches the host.
struct NodeHost::Loaded {
  std::unique_ptr<LoadRequest> request;
  std::shared_ptr<const RuleSet> rules;  // from the file
  std::string rules_text, rules_error;
  std::shared_ptr<const RlsConfig> rls;
  std::string rls_error;
  std::shared_ptr<const RuleSet> offered;
  std::string offered_error;
};

NodeHost::NodeHost(boost::asio::io_context& io, NodeHostOptions options)
    : io_(io),
      options_(std::move(options)),
      incarnation_(options_.incarnation ? options_.incarnation : incarnation_from_wall_clock()),
      random_(seed_from_os()),
      tick_timer_(io),
      watch_timer_(io),
      leave_timer_(io),
      state_timer_(io) {
  // The files first: a broken one stops the start before any socket is bound.
  file_rules_ = std::make_shared<const RuleSet>();
  if (!options_.rules_file.empty()) {
    rules_fingerprint_ = file_fingerprint(options_.rules_file);  // first: an edit while reading is seen again
    set_rules_text(read_config_file(options_.rules_file, "rules file"), options_.rules_file);
  } else if (!options_.rules_text.empty()) {
    set_rules_text(options_.rules_text, options_.rules_origin);
  }
  if (options_.rls_dynamic) {
    // No domain until the first config is offered: every call is answered OK (unlimited), and
    // /readyz and rls_config_missing say so.
    rls_missing_ = true;
    set_rls_config(std::make_shared<const RlsConfig>(std::vector<RlsDomain>{}));
  } else if (!options_.rls_config.empty()) {
    rls_fingerprint_ = rls_config_fingerprint(options_.rls_config);
    if (options_.rls_config_optional && !rls_config_exists(options_.rls_config)) {
      // Asked to start without it: no domain, so every call is answered OK (unlimited) until
      // the file appears (the watch reads it then); /readyz and rls_config_missing say so.
      rls_missing_ = true;
      set_rls_config(std::make_shared<const RlsConfig>(std::vector<RlsDomain>{}));
      log(LogLevel::kWarn, "no RLS config at " + options_.rls_config +
                               " yet (--rls-config-optional): every rate limit call is answered OK, unlimited, "
                               "until one is written there");
    } else {
      set_rls_config(load_rls_config(options_.rls_config, rls_load_options()));
    }
  }
  ClusterKeys keys;
  if (!options_.cluster_key_file.empty()) {
    keys = load_cluster_keys(options_.cluster_key_file);
    if (auto w = cluster_key_file_warning(options_.cluster_key_file)) log(LogLevel::kWarn, *w);
  }
  keys_ = std::make_unique<ClusterKeys>(keys);
  std::vector<PeerSpec> peers;
  if (options_.node.membership == MembershipKind::kStatic) {
    peers_fingerprint_ = file_fingerprint(options_.peers_file);
    peers = load_peers_file(options_.peers_file);
  }

  if (options_.transport == TransportKind::kUdp) {
    auto udp = std::make_unique<UdpTransport>(io_, options_.bind, keys, options_.max_datagram);
    port_ = udp->port();
    transport_ = std::move(udp);
  } else {
    auto tcp = std::make_unique<TcpTransport>(io_, options_.bind, keys, TcpTransportOptions{});
    port_ = tcp->port();
    transport_ = std::move(tcp);
  }
  // Port 0 chose a free port: the others must be told the real one.
  const bool bind_port_was_zero = options_.bind.ends_with(":0");
  if (bind_port_was_zero) options_.bind.replace(options_.bind.size() - 1, 1, std::to_string(port_));
  if (options_.node_id.empty()) {
    node_id_from_port_zero_ = bind_port_was_zero;
    options_.node_id = options_.bind;
  }
  transport_->set_source_limits({options_.gossip_peer_bytes_per_second, options_.gossip_peer_bytes_per_second});
  transport_->set_max_message_age(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::nanoseconds(options_.max_message_age_ns)));
  transport_->set_offense_reporter([this](std::string_view who, std::string_view what) { report_offense(who, what); });
  faults_ = std::make_unique<FaultInjectingTransport>(io_, *transport_, random_);

  NodeOptions n = node_options(options_, incarnation_);
  if (options_.concurrent_checks) {
    // The owner seals what the checking threads leave pending when a flood of keys asks for it.
    n.seal_wanted = [this] { boost::asio::post(io_, [this] { node_->seal_early(now_ns()); }); };
  }
  // Every batch, sealed here or relayed by anyone, must fit one datagram.
  const size_t max_batch_bytes = max_batch_bytes_for(options_.max_datagram);
  n.split_for_sealing = [id = n.id, max_batch_bytes](std::vector<ConsumptionEntry> entries) {
    return split_for_sealing(std::move(entries), id, max_batch_bytes);
  };
  // A transfer of balances to a starting peer goes a page per message: each fits one datagram
  // (TCP: 16 KiB, so that the 64 pages one request may draw stay well inside a peer's send queue).
  const size_t max_page_bytes = options_.transport == TransportKind::kUdp ? options_.max_datagram : size_t{16} << 10;
  // And at most about 180 KB of pages a round to one asker: 128 datagrams, or 12 frames.
  n.sync_pages_per_round = std::max<size_t>(1, (size_t{128} * 1400) / max_page_bytes);
  n.split_for_transfer = [max_page_bytes](std::vector<OriginDigest> positions,
                                          std::vector<std::pair<std::string, int64_t>> balances,
                                          std::vector<ResetMark> resets) {
    return split_transfer(std::move(positions), std::move(balances), std::move(resets), max_page_bytes);
  };
  // Keys are hashed with a secret of this process, 128 bits straight from the operating system
  // (not from random_, whose 64-bit state its outputs would give away).
  n.keys.hash_key = std::array<uint64_t, 2>{seed_from_os(), seed_from_os()};
  n.leases.hash_key = std::array<uint64_t, 2>{seed_from_os(), seed_from_os()};
  // Lease ids are secrets (whoever knows one can release the lease): straight from getrandom(2),
  // which does not fail for requests this small once the pool is initialised.
  n.lease_ids = [](uint8_t* out, size_t size) {
    for (size_t done = 0; done < size;) {
      const ssize_t got = ::getrandom(out + done, size - done, 0);
      if (got > 0) done += size_t(got);
    }
  };
  max_key_bytes_ = n.keys.max_key_bytes;
  node_ = std::make_unique<Node>(n, combined_rules(), *faults_, random_);
  if (options_.node.membership == MembershipKind::kStatic) {
    check_own_peers_line(peers);
    node_->set_peers(peers, now_ns());
  }
  faults_->set_receiver([this](GossipMessage&& m) { node_->receive(m, now_ns()); });
  load_state();  // before any check or message: they would count on top of it
}

// --state-dir: the previous life's balances and ledger positions, refilled by the time it was
// down. A file that cannot be used stops the start (ConfigError naming it): starting without it
// would hand out a fresh burst of every spent long-window key, silently.
void NodeHost::load_state() {
  if (options_.state_dir.empty()) return;
  if (node_id_from_port_zero_) {
    throw ConfigError(options_.state_dir, 0, 0,
                      "a state directory needs a node id that stays the same across restarts: give one (--node-id, "
                      "MemberOptions::node_id) when the gossip port is 0");
  }
  struct stat st {};
  if (::stat(options_.state_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
      ::access(options_.state_dir.c_str(), W_OK | X_OK) != 0) {
    throw ConfigError(options_.state_dir, 0, 0, "the state directory must be a directory this process can write");
  }
  const std::string path = options_.state_dir + "/state";
  const std::optional<std::string> bytes = state::read_file(path);
  if (!bytes) {
    log(LogLevel::kInfo, "no state in " + options_.state_dir + " (a first start): every bucket starts full");
    return;
  }
  const state::Loaded loaded = state::decode(*bytes, *keys_, path);
  if (loaded.state.node_id != options_.node_id) {
    throw ConfigError(path, 0, 0,
                      "written by node " + printable(loaded.state.node_id) + ", this is node " +
                          printable(options_.node_id) + ": each node needs its own --state-dir");
  }
  // (A written time in the future, a clock set back, refills nothing; one absurdly far in the
  // past, from a file forged with the empty key of --insecure-gossip, no more than ten years.)
  const int64_t written = std::clamp<int64_t>(loaded.written_unix_ns, 0, wall_now_ns());
  const int64_t down_ns = wall_now_ns() - written;
  state_.restored = node_->import_state(loaded.state, now_ns(), down_ns);
  log(LogLevel::kInfo, "state from " + path + ": " + std::to_string(state_.restored) + " of " +
                           std::to_string(loaded.state.balances.size()) + " balances restored, " +
                           std::to_string(down_ns / kNanosPerMilli) + " ms of refill since it was written");
}

namespace {

// Encodes and writes a state file, off the node's thread: what the writer reports back.
// Never throws: what goes wrong (memory, a state too large, OpenSSL) is the write's error, and
// the node goes on.
NodeHost::StateWrite encode_and_write(const NodeState& s, const ClusterKeys& keys, const std::string& path) {
  const auto start = std::chrono::steady_clock::now();
  NodeHost::StateWrite w;
  std::string bytes;
  try {
    bytes = state::encode(s, wall_now_ns(), keys);
  } catch (const std::exception& e) {
    w.error = e.what();
    return w;
  }
  w.error = write_file_atomically(path, bytes);
  w.bytes = bytes.size();
  w.ns =
      uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  return w;
}

}  // namespace

// The node's state is exported on its thread (a copy of every unfull balance: the only part
// that holds checks up, state_export_ms), then encoded, authenticated and written to disk on a
// thread of its own (state_write_ms). A write still under way when the next is due makes that one
// wait for the next interval (state_writes_skipped).
void NodeHost::collect_state_write() {
  if (!state_writer_.valid()) return;
  const StateWrite w = state_writer_.get();
  const std::string path = options_.state_dir + "/state";
  if (!w.error.empty()) {
    ++state_.write_failures;
    if (!state_.failing)
      log(LogLevel::kError, "state not written to " + path + ": " + w.error + " (logged once until it works)");
    state_.failing = true;
    return;
  }
  if (state_.failing) log(LogLevel::kInfo, "state written to " + path + " again");
  state_.failing = false;
  ++state_.writes;
  state_.bytes = w.bytes;
  state_.write_ns = w.ns;
}

void NodeHost::start_state_write() {
  if (exporting_ ||
      (state_writer_.valid() && state_writer_.wait_for(std::chrono::seconds(0)) != std::future_status::ready)) {
    ++state_.skipped;
    return;
  }
  collect_state_write();
  exporting_ = std::make_shared<NodeState>(node_->begin_export(now_ns()));
  export_cursor_ = 0;
  state_.export_slice_ns = 0;
  boost::asio::post(io_, [this, generation = ++export_generation_] { export_slice(generation); });
}

// One slice of the export on the node's thread; checks and rounds run between slices.
void NodeHost::export_slice(uint64_t generation) {
  if (generation != export_generation_ || !exporting_) return;  // write_state() took over
  constexpr size_t kEntriesPerSlice = 4'096;
  const auto start = std::chrono::steady_clock::now();
  const bool done = node_->continue_export(*exporting_, &export_cursor_, kEntriesPerSlice, now_ns());
  state_.export_slice_ns = std::max<uint64_t>(
      state_.export_slice_ns,
      uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count()));
  if (!done) {
    boost::asio::post(io_, [this, generation] { export_slice(generation); });
    return;
  }
  launch_state_writer(std::move(exporting_));
}

void NodeHost::launch_state_writer(std::shared_ptr<NodeState> s) {
  try {
    state_writer_ = std::async(std::launch::async, [s, keys = *keys_, path = options_.state_dir + "/state"] {
      return encode_and_write(*s, keys, path);
    });
  } catch (const std::exception& e) {  // no thread to be had (a task limit): this write is lost
    std::promise<StateWrite> failed;
    failed.set_value(StateWrite{std::string("cannot start the writer thread: ") + e.what(), 0, 0});
    state_writer_ = failed.get_future();
  }
}

std::string NodeHost::write_state() {
  if (options_.state_dir.empty()) return "no state directory";
  ++export_generation_;  // an export in slices stops here: this one is whole
  exporting_.reset();
  collect_state_write();  // a write in flight goes first (waits for it)
  launch_state_writer(std::make_shared<NodeState>(node_->export_state(now_ns())));
  const uint64_t failures = state_.write_failures;
  collect_state_write();
  return state_.write_failures > failures ? "the state was not written (see the log)" : "";
}

void NodeHost::schedule_state() {
  if (options_.state_dir.empty()) return;
  state_timer_.expires_after(std::chrono::nanoseconds(options_.state_interval_ns));
  state_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    start_state_write();
    schedule_state();
  });
}

NodeHost::~NodeHost() {
  alive_.reset();  // a load that finishes now is dropped on the owner's thread
  if (loader_) {
    loader_->stop();  // a load not started is abandoned; one under way is waited for
    loader_->join();
  }
}

NodeOptions NodeHost::node_options(const NodeHostOptions& options, uint64_t incarnation) {
  NodeOptions n;
  n.id = options.node_id;
  n.address = options.bind;
  n.incarnation = incarnation;
  n.seeds = options.seeds;
  options.node.apply_to(n);
  n.early_seal_keys = options.early_seal_keys;
  n.keys.precise_clock = options.precise_clock;
  n.keys.coarse_lag_ns = options.coarse_lag_ns;
  n.keys.concurrent = options.concurrent_checks;  // checks from other threads than the owner's
  return n;
}

MonoNanos NodeHost::now_ns() const { return steady_now(); }

void NodeHost::log(LogLevel level, const std::string& line) const {
  // Lines carry text from files and fetched documents (a field name, a peer's address): escaped.
  if (options_.log) options_.log(level, printable(line));
}

void NodeHost::start() {
  tick_timer_.expires_after(std::chrono::nanoseconds(0));
  schedule_tick();
  schedule_watch();
  schedule_state();
}

void NodeHost::schedule_tick() {
  // Rounds keep their cadence: the next deadline follows the previous one, not the end of the
  // work; after a stall the node skips to now rather than running rounds back to back.
  const auto interval = std::chrono::nanoseconds(options_.node.interval_ns);
  auto next = tick_timer_.expiry() + interval;
  if (next < std::chrono::steady_clock::now()) next = std::chrono::steady_clock::now() + interval;
  tick_timer_.expires_at(next);
  tick_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    const MonoNanos start = now_ns();
    node_->tick(start);
    if (options_.on_round) options_.on_round(now_ns() - start);
    schedule_tick();
  });
}

void NodeHost::schedule_watch() {
  watch_timer_.expires_after(std::chrono::seconds(1));
  watch_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    watch_files();
    schedule_watch();
  });
}

void NodeHost::watch_files() {
  reload_peers_if_changed();
  // An edited rules file applies within two seconds: once its fingerprint has held for a whole
  // watch, so that a file written in place (truncated, then filled) is not read half-written,
  // which could parse as fewer rules and drop buckets. A broken one is reported once (its
  // fingerprint is taken) and the rules in force stay.
  LoadRequest r;
  if (!options_.rules_file.empty()) {
    const std::string now = file_fingerprint(options_.rules_file);
    if (now == rules_fingerprint_) {
      rules_changing_.clear();
    } else if (now != rules_changing_) {
      rules_changing_ = now;
    } else {
      rules_changing_.clear();
      r.rules_file = true;
    }
  }
  r.rls = !options_.rls_config.empty() && rls_config_fingerprint(options_.rls_config) != rls_fingerprint_;
  if (r.rules_file || r.rls) request_load(std::move(r));
}

void NodeHost::reload(std::function<void()> done) {
  LoadRequest r;
  r.rules_file = !options_.rules_file.empty();
  r.rls = !options_.rls_config.empty();
  if (done) r.done.push_back(std::move(done));
  request_load(std::move(r));
  // The cluster key file too: each step of a key rotation is a reload on every node. (Small, and
  // read here: the next round is signed with it.)
  reload_cluster_keys();
}

void NodeHost::set_rules_text(std::string text, const std::string& origin) {
  auto rules = parse_rules(text, origin);  // first (a throw keeps the rules in force), and before text moves
  keep_rules(std::move(rules), std::move(text));
}

void NodeHost::keep_rules(std::shared_ptr<const RuleSet> rules, std::string text) {
  file_rules_ = std::move(rules);
  rules_version_ = content_version(text);
  rules_text_ = std::move(text);
}

std::shared_ptr<const RuleSet> NodeHost::combined_rules() const {
  auto rls = staged_rls_ ? staged_rls_ : rls_config();
  if (!rls) return file_rules_;
  return std::make_shared<const RuleSet>(file_rules_->rules(), file_rules_->default_limit(), std::move(rls),
                                         file_rules_->own_concurrency_rules());
}

void NodeHost::put_rules_in_force() {
  node_->replace_rules(combined_rules(), now_ns());
  // A new RLS config reaches the front ends (and Member::should_rate_limit) only once the node's
  // rules hold its limits: a bucket key planned from it is then always known to the node.
  if (staged_rls_) {
    rls_missing_ = false;
    set_rls_config(staged_rls_);
    for (const auto& listener : rls_listeners_) listener(staged_rls_);
    staged_rls_.reset();
  }
}

void NodeHost::offer_rls_config(std::shared_ptr<const RlsConfig> config, const std::string& origin) {
  log(LogLevel::kInfo, "RLS config from " + origin + ": " + std::to_string(config->domains().size()) + " domains");
  staged_rls_ = std::move(config);
  ++reloads_.rls;
  put_rules_in_force();
}

void NodeHost::offer_rules(std::string text, const std::string& origin, std::function<void(const std::string&)> done) {
  LoadRequest r;
  r.offered = true;
  r.offered_text = std::move(text);
  r.offered_origin = origin;
  if (done) r.offer_done.push_back(std::move(done));
  request_load(std::move(r));
}

void NodeHost::request_load(LoadRequest r) {
  // The fingerprints now, before the read: an edit made while it runs is seen again.
  if (r.rules_file) rules_fingerprint_ = file_fingerprint(options_.rules_file);
  if (r.rls) rls_fingerprint_ = rls_config_fingerprint(options_.rls_config);
  if (!loading_) {
    loading_ = std::make_unique<LoadRequest>(std::move(r));
    start_load();
    return;
  }
  if (!next_load_) {
    next_load_ = std::make_unique<LoadRequest>(std::move(r));
    return;
  }
  LoadRequest& next = *next_load_;
  next.rules_file = next.rules_file || r.rules_file;
  next.rls = next.rls || r.rls;
  if (r.offered) {  // a newer offer replaces one not started yet
    for (auto& superseded : next.offer_done) superseded("superseded by a newer document before it was parsed");
    next.offer_done.clear();
    next.offered = true;
    next.offered_text = std::move(r.offered_text);
    next.offered_origin = std::move(r.offered_origin);
  }
  for (auto& d : r.offer_done) next.offer_done.push_back(std::move(d));
  for (auto& d : r.done) next.done.push_back(std::move(d));
}

void NodeHost::start_load() {
  if (!loader_) loader_ = std::make_unique<boost::asio::thread_pool>(1);
  // The loader thread sees copies only: the paths, and the request it owns until it posts back.
  auto loaded = std::make_shared<Loaded>();
  loaded->request = std::make_unique<LoadRequest>(std::move(*loading_));
  boost::asio::post(*loader_, [loaded, rules_file = options_.rules_file, rls_path = options_.rls_config,
                               rls_options = rls_load_options(), hook = options_.on_load_start,
                               alive = std::weak_ptr<char>(alive_), &io = io_, this] {
    if (hook) hook();
    const LoadRequest& r = *loaded->request;
    if (r.rules_file) {
      try {
        loaded->rules_text = read_config_file(rules_file, "rules file");
        loaded->rules = parse_rules(loaded->rules_text, rules_file);
      } catch (const std::exception& e) {
        loaded->rules_error = e.what();
      }
    }
    if (r.rls) {
      try {
        loaded->rls = load_rls_config(rls_path, rls_options);
      } catch (const std::exception& e) {
        loaded->rls_error = e.what();
      }
    }
    if (r.offered) {
      try {
        loaded->offered = parse_rules(r.offered_text, r.offered_origin);
      } catch (const std::exception& e) {
        loaded->offered_error = e.what();
      }
    }
    boost::asio::post(io, [loaded, alive, this] {
      if (alive.expired()) return;  // the host is gone (its destructor waits for this thread)
      finish_load(*loaded);
    });
  });
}

void NodeHost::finish_load(Loaded& l) {
  LoadRequest& r = *l.request;
  bool changed = false;
  auto take_rules = [&](std::shared_ptr<const RuleSet> rules, std::string text, const std::string& origin) {
    keep_rules(std::move(rules), std::move(text));
    ++reloads_.rules;
    log_rules_reloaded(origin);
    changed = true;
  };
  if (r.rules_file) {
    if (!l.rules_error.empty()) {
      ++reloads_.rules_failed;
      log(LogLevel::kError, "rules not reloaded, the previous rules (version " + std::to_string(rules_version_) +
                                ") stay in force: " + l.rules_error);
    } else {
      take_rules(std::move(l.rules), std::move(l.rules_text), options_.rules_file);
    }
  }
  if (r.rls) {
    if (!l.rls_error.empty()) {
      ++reloads_.rls_failed;
      log(LogLevel::kError, "RLS config not reloaded, the previous config stays in force: " + l.rls_error);
    } else {
      log(LogLevel::kInfo, "RLS config reloaded from " + options_.rls_config + ": " +
                               std::to_string(l.rls->domains().size()) + " domains");
      staged_rls_ = std::move(l.rls);  // in force with the rules that hold it (put_rules_in_force)
      ++reloads_.rls;
      changed = true;
    }
  }
  std::string refused;
  if (r.offered) {
    const int64_t version = content_version(r.offered_text);
    if (version == rules_version_) {
      // Back to what is in force (after a refused version): nothing to do.
    } else if (!l.offered_error.empty()) {
      ++reloads_.rules_failed;
      refused = l.offered_error;
      log(LogLevel::kError, "rules version " + std::to_string(version) + " refused, the previous rules (version " +
                                std::to_string(rules_version_) + ") stay in force: " + refused);
    } else {
      take_rules(std::move(l.offered), std::move(r.offered_text), r.offered_origin);
    }
  }
  if (changed) put_rules_in_force();
  loading_.reset();
  if (next_load_) {
    loading_ = std::move(next_load_);
    start_load();
  }
  for (auto& d : r.offer_done) d(refused);
  for (auto& d : r.done) d();
}

void NodeHost::log_rules_reloaded(const std::string& origin) const {
  log(LogLevel::kInfo, "rules reloaded from " + origin + ": " + std::to_string(file_rules_->rules().size()) +
                           " rules, version " + std::to_string(rules_version_));
}

std::shared_ptr<const RlsConfig> NodeHost::rls_config() const {
  const std::lock_guard lock(rls_config_mu_);
  return rls_config_;
}

void NodeHost::set_rls_config(std::shared_ptr<const RlsConfig> config) {
  const std::lock_guard lock(rls_config_mu_);
  rls_config_ = std::move(config);
}

void NodeHost::on_rls_config(std::function<void(std::shared_ptr<const RlsConfig>)> listener) {
  rls_listeners_.push_back(std::move(listener));
}

void NodeHost::reload_cluster_keys() {
  if (options_.cluster_key_file.empty()) return;
  try {
    ClusterKeys keys = load_cluster_keys(options_.cluster_key_file);
    faults_->set_cluster_keys(keys);
    *keys_ = std::move(keys);
    ++reloads_.keys;
    log(LogLevel::kInfo, "cluster keys reloaded from " + options_.cluster_key_file);
  } catch (const std::exception& e) {
    ++reloads_.keys_failed;
    log(LogLevel::kError, std::string("cluster keys not reloaded, the previous keys stay in force: ") + e.what());
  }
}

void NodeHost::reload_peers_if_changed() {
  if (options_.node.membership != MembershipKind::kStatic) return;
  const std::string now = file_fingerprint(options_.peers_file);
  if (now == peers_fingerprint_ || now == "missing") return;  // missing: being replaced; next second
  peers_fingerprint_ = now;                                   // a broken file is reported once, not every second
  try {
    const auto peers = load_peers_file(options_.peers_file);
    check_own_peers_line(peers);
    node_->set_peers(peers, now_ns());
    ++reloads_.peers;
    log(LogLevel::kInfo, "peers reloaded from " + options_.peers_file + ": " + std::to_string(peers.size()) + " peers");
  } catch (const std::exception& e) {
    ++reloads_.peers_failed;
    log(LogLevel::kError, std::string("peers not reloaded, the previous list stays in force: ") + e.what());
  }
}

void NodeHost::check_own_peers_line(const std::vector<PeerSpec>& peers) {
  // A node the peers file does not list as it binds is heard by nobody (its gossip is dropped as
  // from an unknown sender or from the wrong address) and enforces alone, over-admitting.
  const PeerSpec* own = nullptr;
  for (const PeerSpec& p : peers) {
    if (p.id == options_.node_id) own = &p;
  }
  peers_problem_ = false;
  if (!own) {
    peers_problem_ = true;
    log(LogLevel::kError, options_.peers_file + ": no line for this node, \"" + options_.node_id +
                              "\": the other nodes drop its gossip, and it enforces its limits alone. Add `" +
                              options_.node_id + " " + options_.bind + "` to the peers file on every node");
    return;
  }
  if (own->address == options_.bind) return;
  std::string bind_host, own_host;
  uint16_t bind_port = 0, own_port = 0;
  std::string ignored;
  const bool parsed = split_host_port(options_.bind, &bind_host, &bind_port, &ignored) &&
                      split_host_port(own->address, &own_host, &own_port, &ignored);
  const bool any_interface = bind_host == "0.0.0.0" || bind_host == "::";
  if (parsed && any_interface && bind_port == own_port) {
    log(LogLevel::kWarn, "--bind " + options_.bind + " listens on every interface; the peers file gives this node " +
                             own->address + ", where the others send to it (a private address is safer)");
    return;
  }
  peers_problem_ = true;
  log(LogLevel::kError, options_.peers_file + ": this node, \"" + options_.node_id + "\", is listed at " +
                            own->address + " but binds " + options_.bind +
                            ": the others send to the listed address and drop what comes from another");
}

void NodeHost::stop_rounds() {
  stopped_ = true;
  tick_timer_.cancel();
  watch_timer_.cancel();
  state_timer_.cancel();
}

void NodeHost::leave(std::function<void()> done) {
  stop_rounds();
  node_->leave(now_ns());
  // The last state, after the departure sealed what this node admitted: a restart picks up here.
  if (!options_.state_dir.empty()) {
    if (const std::string error = write_state(); !error.empty()) {
      log(LogLevel::kError, "the last state was not written to " + options_.state_dir +
                                "/state: a restart takes the previous one, and what was admitted since is not in it");
    }
  }
  // Give the departure datagrams a moment to leave the socket, then stop.
  leave_timer_.expires_after(std::chrono::milliseconds(100));
  leave_timer_.async_wait([this, done = std::move(done)](const boost::system::error_code&) {
    transport_->stop();
    if (done) done();
  });
}

void NodeHost::report_offense(std::string_view offender, std::string_view what) {
  const std::lock_guard lock(offenses_mu_);
  const auto verdict = offenses_.admit(offender, now_ns());
  if (!verdict) return;
  const int64_t interval_s = OffenseLimiterOptions{}.interval_ns / kNanosPerSecond;
  std::string line = std::string(verdict->offender) + ": " + std::string(what);
  if (verdict->suppressed > 0) {
    line += " (" + std::to_string(verdict->suppressed) + " more reports from it suppressed in the last " +
            std::to_string(interval_s) + " s)";
  } else {
    line += " (further reports from it are limited to one every " + std::to_string(interval_s) + " s)";
  }
  log(LogLevel::kWarn, line);
}

namespace {

// What NodeHost::stats() reads, gathered once per call.
struct HostStatSources {
  const NodeStats& n;
  const KeyTableStats& k;
  const LedgerStats& l;
  const MembershipStats& m;
  const TransportStats& t;
  const FaultStats& f;
  const HostReloads& r;
  const LeaseStats& ls;
  const InflightViewStats& iv;
  int64_t rules_version, peers_problem, relay_groups, syncing, rls_missing;
  uint64_t state_writes, state_write_failures, state_restored, state_bytes, state_write_ns, state_export_slice_ns,
      state_skipped;
};

struct HostStat {
  StatDef def;
  int64_t (*get)(const HostStatSources&);
};

#define TOLLGATE_STAT(name, kind, unit, help, expr)                                                             \
  HostStat {                                                                                                    \
    StatDef{name, StatKind::kind, help, StatUnit::unit}, [](const HostStatSources& s) { return int64_t(expr); } \
  }

// The host's stats, in the order `tollgate stats` lists them (docs/operations.md, section 7).
const HostStat kHostStats[] = {
    TOLLGATE_STAT("checks", kCounter, kNone, "Local admission decisions", s.n.checks),
    TOLLGATE_STAT("checks_allowed", kCounter, kNone, "Local admission decisions that allowed", s.n.allowed),
    TOLLGATE_STAT("checks_denied", kCounter, kNone, "Local admission decisions that denied", s.n.denied),
    TOLLGATE_STAT("rounds", kCounter, kNone, "Gossip rounds run", s.n.rounds),
    TOLLGATE_STAT("rules_version", kGauge, kNone, "Version (content hash) of the rules in force", s.rules_version),
    TOLLGATE_STAT("rules_reloads", kCounter, kNone, "New rules put in force", s.r.rules),
    TOLLGATE_STAT("rules_reload_failures", kCounter, kNone, "Rules refused (the previous stayed in force)",
                  s.r.rules_failed),
    TOLLGATE_STAT("cluster_key_reloads", kCounter, kNone, "Cluster key files read again", s.r.keys),
    TOLLGATE_STAT("cluster_key_reload_failures", kCounter, kNone,
                  "Cluster key files refused (the keys in force stayed)", s.r.keys_failed),
    TOLLGATE_STAT("rls_config_reloads", kCounter, kNone, "RLS configs put in force", s.r.rls),
    TOLLGATE_STAT("rls_config_reload_failures", kCounter, kNone, "RLS configs refused (the previous stayed)",
                  s.r.rls_failed),
    TOLLGATE_STAT("rls_config_missing", kGauge, kNone,
                  "1 while --rls-config-optional found no RLS config yet: every rate limit call answered OK",
                  s.rls_missing),
    TOLLGATE_STAT("peers_reloads", kCounter, kNone, "Peers files read again", s.r.peers),
    TOLLGATE_STAT("peers_reload_failures", kCounter, kNone, "Peers files refused (the list in force stayed)",
                  s.r.peers_failed),
    TOLLGATE_STAT("peers_self_mismatch", kGauge, kNone, "1 when the peers file does not list this node as it binds",
                  s.peers_problem),
    TOLLGATE_STAT("keys", kGauge, kNone, "Buckets held", s.k.keys),
    TOLLGATE_STAT("key_bytes", kGauge, kBytes, "Estimated memory of the key table", s.k.bytes),
    TOLLGATE_STAT("key_evictions", kCounter, kNone, "Keys evicted at --max-keys", s.k.evictions),
    TOLLGATE_STAT("keys_idle_removed", kCounter, kNone, "Full buckets swept away", s.k.idle_removed),
    TOLLGATE_STAT("keys_rejected_too_long", kCounter, kNone, "Checks refused for keys over the length limit",
                  s.k.rejected_keys),
    TOLLGATE_STAT("keys_restored_from_eviction", kCounter, kNone,
                  "Keys re-created at a remembered balance rather than full", s.k.restored),
    TOLLGATE_STAT("keys_pending_dropped", kCounter, kNone, "Evicted keys' consumption dropped before it was sent",
                  s.k.pending_dropped),
    TOLLGATE_STAT("keys_longest_probe", kGauge, kNone, "Farthest an index entry sits from its home slot",
                  s.k.longest_probe),
    TOLLGATE_STAT("state_writes", kCounter, kNone, "State files written (--state-dir)", s.state_writes),
    TOLLGATE_STAT("state_write_failures", kCounter, kNone, "State files not written", s.state_write_failures),
    TOLLGATE_STAT("state_keys_restored", kGauge, kNone, "Balances read back from the state file at start",
                  s.state_restored),
    TOLLGATE_STAT("state_bytes", kGauge, kBytes, "Size of the last state file", s.state_bytes),
    TOLLGATE_STAT("state_write_ns", kGauge, kNanoseconds, "Time the last state write took", s.state_write_ns),
    TOLLGATE_STAT("state_export_slice_ns", kGauge, kNanoseconds,
                  "Longest slice of the last state copy on the node's thread", s.state_export_slice_ns),
    TOLLGATE_STAT("state_writes_skipped", kCounter, kNone, "State writes skipped, the previous one still running",
                  s.state_skipped),
    TOLLGATE_STAT("batches_sealed", kCounter, kNone, "Own consumption batches sealed", s.l.sealed),
    TOLLGATE_STAT("batches_applied", kCounter, kNone, "Remote batches charged", s.l.applied),
    TOLLGATE_STAT("batches_duplicate", kCounter, kNone, "Batch copies dropped as already charged", s.l.duplicates),
    TOLLGATE_STAT("batches_stale_incarnation", kCounter, kNone, "Batches from an older life of their origin",
                  s.l.stale),
    TOLLGATE_STAT("batches_origin_overflow", kCounter, kNone, "Batches dropped beyond the origins tracked",
                  s.l.origin_overflow),
    TOLLGATE_STAT("batches_claiming_our_id", kCounter, kNone, "Batches from another process using this node's id",
                  s.l.self_conflicts),
    TOLLGATE_STAT("seqs_abandoned", kCounter, kNone, "Lost batches given up, never charged", s.l.abandoned),
    TOLLGATE_STAT("ledger_origins", kGauge, kNone, "Origins whose batches the ledger tracks", s.l.origins),
    TOLLGATE_STAT("ledger_bytes", kGauge, kBytes, "Memory of the ledger's windows and retained batches", s.l.bytes),
    TOLLGATE_STAT("members_joined", kCounter, kNone, "Members added", s.m.joined),
    TOLLGATE_STAT("members_failed", kCounter, kNone, "Members turned suspect or unreachable", s.m.failed),
    TOLLGATE_STAT("members_recovered", kCounter, kNone, "Members back to alive", s.m.recovered),
    TOLLGATE_STAT("members_restarted", kCounter, kNone, "Members seen with a higher incarnation", s.m.restarted),
    TOLLGATE_STAT("members_forgotten", kCounter, kNone, "Dead or departed members removed", s.m.forgotten),
    TOLLGATE_STAT("members_unknown_rows", kCounter, kNone, "Rows about members not in the peers file",
                  s.m.unknown_rows),
    TOLLGATE_STAT("members_refuted", kCounter, kNone, "Times this node outbid a claim about itself", s.m.refuted),
    TOLLGATE_STAT("members_implausible_incarnation", kCounter, kNone, "Rows with an incarnation too far ahead, ignored",
                  s.m.implausible),
    TOLLGATE_STAT("gossip_messages_sent", kCounter, kNone, "Gossip messages handed to the transport",
                  s.n.messages_sent),
    TOLLGATE_STAT("gossip_messages_received", kCounter, kNone, "Gossip message parts accepted", s.n.messages_received),
    TOLLGATE_STAT("gossip_dropped_unknown_sender", kCounter, kNone, "Messages from a sender not in the peers file",
                  s.n.dropped_unknown_sender),
    TOLLGATE_STAT("gossip_dropped_own_id", kCounter, kNone, "Messages claiming this node's id", s.n.dropped_self),
    TOLLGATE_STAT("gossip_queue_overflow", kCounter, kNone, "Batches pushed out of the retransmit queue",
                  s.n.queue_overflow),
    TOLLGATE_STAT("push_pulls", kCounter, kNone, "Digests sent to a peer for repair", s.n.push_pulls),
    TOLLGATE_STAT("repairs_sent", kCounter, kNone, "Batches sent in answer to a digest", s.n.repairs_sent),
    TOLLGATE_STAT("early_seals", kCounter, kNone, "Times a check sealed before the round (a key flood)",
                  s.n.early_seals),
    TOLLGATE_STAT("gossip_queue_expired", kCounter, kNone, "Queued batches older than retention, unsent",
                  s.n.queue_expired),
    TOLLGATE_STAT("gossip_dropped_wrong_source", kCounter, kNone, "Messages not from their sender's gossip address",
                  s.n.dropped_wrong_source),
    TOLLGATE_STAT("digests_ignored", kCounter, kNone, "Digest requests already answered (replays)",
                  s.n.digests_ignored),
    TOLLGATE_STAT("repairs_capped", kCounter, kNone, "Repair batches left out, the sender's budget spent",
                  s.n.repairs_capped),
    TOLLGATE_STAT("relayed", kCounter, kNone, "Other groups' batches summed for this node's group", s.n.relayed),
    TOLLGATE_STAT("relay_mismatch", kCounter, kNone, "Messages whose sender counts other relay groups",
                  s.n.relay_mismatch),
    TOLLGATE_STAT("relay_regroupings", kCounter, kNone, "Changes of mode or of the count of relay groups",
                  s.n.regroupings),
    TOLLGATE_STAT("relay_groups", kGauge, kNone, "Relay groups in use (0: not relaying)", s.relay_groups),
    TOLLGATE_STAT("relay_repair_requests", kCounter, kNone, "Relay: requests for batches missing here (a gap)",
                  s.n.repair_requests),
    TOLLGATE_STAT("relay_repair_gave_up", kCounter, kNone, "Relay: gaps given up after 20 requests",
                  s.n.repair_gave_up),
    TOLLGATE_STAT("member_row_requests", kCounter, kNone, "Rows asked for before failing a silent member",
                  s.n.row_requests),
    TOLLGATE_STAT("member_row_answers", kCounter, kNone, "Rows sent in answer to other members' requests",
                  s.n.row_answers),
    TOLLGATE_STAT("syncing", kGauge, kNone, "1 while waiting at start for a peer's balances (--sync-deadline)",
                  s.syncing),
    TOLLGATE_STAT("sync_denied", kCounter, kNone, "Checks of long-window keys denied while waiting for balances",
                  s.n.sync_denied),
    TOLLGATE_STAT("sync_taken", kCounter, kNone, "Transfers of balances taken from a peer at start", s.n.sync_taken),
    TOLLGATE_STAT("sync_balances", kCounter, kNone, "Balances a transfer lowered here", s.n.sync_balances),
    TOLLGATE_STAT("sync_gave_up", kCounter, kNone, "Times no peer answered by --sync-deadline", s.n.sync_gave_up),
    TOLLGATE_STAT("sync_all_starting", kCounter, kNone, "Times every live member was starting too",
                  s.n.sync_all_starting),
    TOLLGATE_STAT("sync_attempts", kCounter, kNone, "Transfers asked for (one per peer tried)", s.n.sync_attempts),
    TOLLGATE_STAT("sync_served", kCounter, kNone, "Transfers prepared for starting peers", s.n.sync_served),
    TOLLGATE_STAT("sync_pages_sent", kCounter, kNone, "Pages of balances sent to starting peers", s.n.sync_pages_sent),
    TOLLGATE_STAT("sync_refused", kCounter, kNone, "Transfer requests refused (starting, or two served at once)",
                  s.n.sync_refused),
    TOLLGATE_STAT("sync_ignored", kCounter, kNone, "Transfer pages or requests of no session (replays, stale)",
                  s.n.sync_ignored),
    TOLLGATE_STAT("heal_attempts", kCounter, kNone, "Balances asked of a member back from a long partition",
                  s.n.heal_attempts),
    TOLLGATE_STAT("heal_taken", kCounter, kNone, "Balances taken from a member back from a long partition",
                  s.n.heal_taken),
    TOLLGATE_STAT("heal_balances", kCounter, kNone, "Long-window balances a heal transfer lowered here",
                  s.n.heal_balances),
    TOLLGATE_STAT("heal_gave_up", kCounter, kNone, "Heal transfers the member did not answer", s.n.heal_gave_up),
    TOLLGATE_STAT("resets", kCounter, kNone, "Keys reset here (tollgate reset, POST /v1/reset)", s.n.resets),
    TOLLGATE_STAT("resets_applied", kCounter, kNone, "Resets of keys taken, made here or heard of", s.n.resets_applied),
    TOLLGATE_STAT("reset_skipped", kCounter, kNone, "Consumption not counted: admitted before a reset of its key",
                  s.n.reset_skipped),
    TOLLGATE_STAT("reset_epochs_forgotten", kCounter, kNone, "Reset epochs dropped at the bound (65,536 keys)",
                  s.n.reset_epochs_forgotten),
    TOLLGATE_STAT("leases_held", kGauge, kNone, "Concurrency leases this node holds now", s.ls.held),
    TOLLGATE_STAT("leases_acquired", kCounter, kNone, "Concurrency leases granted here", s.ls.acquired),
    TOLLGATE_STAT("leases_denied", kCounter, kNone, "Acquires refused: the key's concurrency limit is held",
                  s.ls.denied),
    TOLLGATE_STAT("leases_refused", kCounter, kNone, "Acquires refused: bad input or too many leases here",
                  s.ls.refused),
    TOLLGATE_STAT("leases_released", kCounter, kNone, "Leases released by their holder", s.ls.released),
    TOLLGATE_STAT("leases_expired", kCounter, kNone, "Leases freed at their TTL", s.ls.expired),
    TOLLGATE_STAT("leases_renewed", kCounter, kNone, "Lease renewals", s.ls.renewed),
    TOLLGATE_STAT("leases_unknown", kCounter, kNone, "Releases and renewals of no lease held here", s.ls.unknown),
    TOLLGATE_STAT("leases_by_key_acquired", kCounter, kNone,
                  "Leases granted by key, for Envoy's concurrency descriptors (hits_addend)", s.ls.anonymous_acquired),
    TOLLGATE_STAT("leases_by_key_released", kCounter, kNone,
                  "Leases by key freed by Envoy's stream-done call (is_negative_hits), oldest first",
                  s.ls.anonymous_released),
    TOLLGATE_STAT("leases_by_key_owed_settled", kCounter, kNone,
                  "Stream-done releases that settled a call which took nothing (denied), freeing no lease",
                  s.ls.owed_settled),
    TOLLGATE_STAT("leases_by_key_unmatched", kCounter, kNone,
                  "Stream-done releases that found no lease and nothing owed (a call this node never saw)",
                  s.ls.anonymous_unmatched),
    TOLLGATE_STAT("leases_by_key_owed_dropped", kCounter, kNone,
                  "Owed releases not recorded: as many keys owe one already as leases may be held (100,000)",
                  s.ls.owed_dropped),
    TOLLGATE_STAT("leases_by_key_keys", kGauge, kNone, "Keys with leases by key or an owed release now",
                  s.ls.queued_keys),
    TOLLGATE_STAT("lease_keys", kGauge, kNone, "Keys with a lease count here, own or other members'", s.ls.keys),
    TOLLGATE_STAT("lease_rows", kGauge, kNone, "Other members' (member, key) lease counts held", s.iv.rows),
    TOLLGATE_STAT("lease_rows_dropped", kCounter, kNone, "Other members' lease counts not kept: at the bound",
                  s.iv.rows_dropped),
    TOLLGATE_STAT("leases_freed_failed_member", kCounter, kNone,
                  "Leases no longer counted because their member failed or left", s.iv.freed_with_failed),
    TOLLGATE_STAT("top_units_sealed", kCounter, kNone, "Top-K summaries this node sent (one per rule and metric)",
                  s.n.top_units_sealed),
    TOLLGATE_STAT("top_units_held", kGauge, kNone, "Other members' top-K summaries held now", s.n.top_units_held),
    TOLLGATE_STAT("top_units_dropped", kCounter, kNone,
                  "Members' top-K summaries not kept: 8,192 held already, or one over 1,200 bytes",
                  s.n.top_units_dropped),
    TOLLGATE_STAT("top_rules_refused", kCounter, kNone, "Top-K counts of rules beyond --top-rules, not kept",
                  s.n.top_rules_refused),
    TOLLGATE_STAT("top_denials_unharvested", kCounter, kNone,
                  "Denials top-K never counted: the key was evicted first, or an all-or-nothing request denied a "
                  "key not yet in the table",
                  s.n.top_denials_unharvested),
    TOLLGATE_STAT("transport_sent", kCounter, kNone, "Datagrams or frames written", s.t.messages_sent),
    TOLLGATE_STAT("transport_bytes_sent", kCounter, kBytes, "Bytes of datagrams or frames written", s.t.bytes_sent),
    TOLLGATE_STAT("transport_received", kCounter, kNone, "Datagrams or frames that decoded and authenticated",
                  s.t.messages_received),
    TOLLGATE_STAT("transport_bytes_received", kCounter, kBytes, "Bytes received, all of them", s.t.bytes_received),
    TOLLGATE_STAT("transport_send_errors", kCounter, kNone, "Sends the kernel refused, or failed writes",
                  s.t.send_errors),
    TOLLGATE_STAT("transport_send_dropped", kCounter, kNone, "Sends dropped at a full queue", s.t.send_dropped),
    TOLLGATE_STAT("transport_unresolved", kCounter, kNone, "Sends to an address that did not resolve", s.t.unresolved),
    TOLLGATE_STAT("transport_encode_dropped", kCounter, kNone, "Batches, rows or digest origins the encoder left out",
                  s.t.encode_dropped),
    TOLLGATE_STAT("faults_dropped_to", kCounter, kNone, "Fault injection: messages dropped to a peer", s.f.dropped_to),
    TOLLGATE_STAT("faults_dropped_from", kCounter, kNone, "Fault injection: messages dropped from a peer",
                  s.f.dropped_from),
    TOLLGATE_STAT("faults_lost", kCounter, kNone, "Fault injection: messages lost", s.f.lost),
    TOLLGATE_STAT("faults_duplicated", kCounter, kNone, "Fault injection: messages duplicated", s.f.duplicated),
    TOLLGATE_STAT("faults_delayed", kCounter, kNone, "Fault injection: messages delayed", s.f.delayed),
};
#undef TOLLGATE_STAT

// Listed after the table's, once they have happened: received and dropped, by reason.
constexpr StatDef kTransportDropped{"transport_dropped_*", StatKind::kCounter,
                                    "Received and dropped, by reason (malformed, bad_mac, stale, ...)"};

}  // namespace

std::vector<StatDef> NodeHost::stat_defs() {
  std::vector<StatDef> defs;
  for (const HostStat& h : kHostStats) defs.push_back(h.def);
  defs.push_back(kTransportDropped);
  return defs;
}

StatsList NodeHost::stats() const {
  const KeyTableStats k = node_->table().stats();
  const LedgerStats l = node_->ledger().stats();
  const TransportStats t = faults_->stats();
  const HostStatSources sources{node_->stats(),
                                k,
                                l,
                                node_->membership().stats(),
                                t,
                                faults_->fault_stats(),
                                reloads_,
                                node_->leases().stats(),
                                node_->inflight_stats(),
                                rules_version_,
                                peers_problem_ ? 1 : 0,
                                int64_t(node_->relay_groups()),
                                node_->syncing() ? 1 : 0,
                                rls_missing_ ? 1 : 0,
                                state_.writes,
                                state_.write_failures,
                                state_.restored,
                                state_.bytes,
                                state_.write_ns,
                                state_.export_slice_ns,
                                state_.skipped};
  StatsList s;
  s.reserve(std::size(kHostStats) + t.dropped.size());
  for (const HostStat& h : kHostStats) s.emplace_back(std::string(h.def.name), h.get(sources));
  const std::string_view family = kTransportDropped.name.substr(0, kTransportDropped.name.size() - 1);
  for (const auto& [reason, count] : t.dropped) s.emplace_back(std::string(family) + reason, int64_t(count));
  return s;
}

}  // namespace tollgate
