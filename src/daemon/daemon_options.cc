#include "daemon/daemon_options.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "api/endpoint.h"
#include "config/strict_yaml.h"
#include "retriever/rules_retriever.h"
#include "tollgate/config_error.h"
#include "tollgate/duration.h"
#include "util/closest.h"

namespace tollgate {
namespace {

// Reads the YAML config file for CLI11: a flat mapping whose keys are the long flag names
// without dashes (`node-id: a`, `seeds: [h:1, h:2]`). Unknown keys and nested mappings are
// errors naming the file, line and column; CLI11 then applies each value unless the flag was
// given on the command line.
class YamlConfig : public CLI::Config {
 public:
  explicit YamlConfig(const CLI::App* app) : app_(app) {}

  // Where the file set `name` (0-based line and column), if it did.
  std::optional<YAML::Mark> where(const std::string& name) const {
    const auto it = marks_.find(name);
    return it == marks_.end() ? std::nullopt : std::optional<YAML::Mark>(it->second);
  }

  std::string to_config(const CLI::App*, bool, bool, std::string) const override { return {}; }

  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    const std::string file = app_->get_config_ptr()->as<std::string>();
    std::stringstream text;
    text << input.rdbuf();
    const YAML::Node root = yaml::load(text.str(), file);
    std::vector<CLI::ConfigItem> result;
    if (root.IsNull()) return result;
    auto fail = [&](const YAML::Node& at, const std::string& why) { yaml::fail(file, at, why); };
    if (!root.IsMap()) fail(root, "expected a mapping of settings, e.g. `mode: gossip`");
    for (const auto& kv : root) {
      const std::string name = kv.first.Scalar();
      const CLI::Option* opt = app_->get_option_no_throw("--" + name);
      if (name == "config" || name == "help" || opt == nullptr) {
        fail(kv.first, "unknown setting \"" + name + "\" (settings are the long flag names: see tollgated --help)");
      }
      // CLI11 would take the first and drop the rest without a word: a repeated key is a mistake.
      if (!marks_.emplace(name, kv.first.Mark()).second) fail(kv.first, "setting \"" + name + "\" appears twice");
      CLI::ConfigItem item;
      item.name = name;
      if (kv.second.IsScalar()) {
        item.inputs.push_back(kv.second.Scalar());
      } else if (kv.second.IsSequence()) {
        for (const auto& v : kv.second) {
          if (!v.IsScalar()) fail(v, "\"" + name + "\": list items must be single values");
          item.inputs.push_back(v.Scalar());
        }
      } else {
        fail(kv.second, "\"" + name + "\" must be a value or a list of values");
      }
      result.push_back(std::move(item));
    }
    return result;
  }

 private:
  const CLI::App* app_;
  mutable std::map<std::string, YAML::Mark> marks_;
};

bool on_command_line(int argc, char** argv, const std::string& flag) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view word = argv[i];
    if (word == flag || (word.starts_with(flag) && word.size() > flag.size() && word[flag.size()] == '=')) return true;
  }
  return false;
}

}  // namespace

std::optional<int> parse_daemon_options(int argc, char** argv, DaemonOptions* o) {
  CLI::App app{
      "tollgated: one per service host. Answers \"may key K spend N tokens?\" locally in microseconds and keeps\n"
      "one token bucket per key across the cluster by sharing consumption with its peers (gossip or full mesh,\n"
      "over UDP or TCP). Settings can also come from a YAML file (--config) whose keys are the long flag names;\n"
      "flags override the file.",
      "tollgated"};
  app.set_version_flag("--version", "tollgated " TOLLGATE_VERSION);
  app.set_config("--config", "", "YAML config file; its keys are the long flag names (e.g. `mode: mesh`)");
  const auto yaml_config = std::make_shared<YamlConfig>(&app);
  app.config_formatter(yaml_config);

  // Every setting is read as text and handed to its row once CLI11 has applied the flags and the
  // file (daemon_settings.cc).
  const std::vector<DaemonSetting>& rows = daemon_settings();
  std::vector<std::string> values(rows.size());
  std::vector<std::vector<std::string>> lists(rows.size());
  const auto switches = std::make_unique<bool[]>(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const DaemonSetting& row = rows[i];
    const std::string flag = "--" + row.flag;
    const std::string shown = row.format(*o);
    switch (row.shape) {
      case SettingShape::kValue: {
        CLI::Option* opt = app.add_option(flag, values[i], row.help)->type_name(row.type_name);
        if (!shown.empty()) opt->default_str(shown);
        break;
      }
      case SettingShape::kList: {
        CLI::Option* opt = app.add_option(flag, lists[i], row.help)->type_name(row.type_name)->delimiter(',');
        if (!shown.empty()) opt->default_str(shown);
        break;
      }
      case SettingShape::kSwitch:
        app.add_flag(flag, switches[i], row.help);
        break;
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every error exits 2, as docs/operations.md section 2 says
    // (CLI11's own codes run from 100 to 120).
    if (app.exit(e) == 0) return 0;
    std::vector<std::string> flags;
    for (const CLI::Option* opt : app.get_options()) {
      for (const std::string& name : opt->get_lnames()) flags.push_back("--" + name);
    }
    for (int i = 1; i < argc; ++i) {
      const std::string_view word = argv[i];
      if (!word.starts_with("--")) continue;
      const std::string flag(word.substr(0, word.find('=')));
      if (std::find(flags.begin(), flags.end(), flag) != flags.end()) continue;
      if (std::string near = closest_name(flag, flags); !near.empty()) {
        std::cerr << "tollgated: unknown flag " << flag << "; did you mean " << near << "?\n";
      }
    }
    return 2;
  } catch (const ConfigError& e) {
    std::cerr << "tollgated: " << e.what() << "\n";
    return 2;
  }
  o->config_file = app.get_config_ptr()->as<std::string>();
  for (size_t i = 0; i < rows.size(); ++i) {
    const DaemonSetting& row = rows[i];
    const std::string flag = "--" + row.flag;
    if (app.count(flag) == 0) continue;  // the default stays
    std::string text;
    switch (row.shape) {
      case SettingShape::kValue:
        text = values[i];
        break;
      case SettingShape::kList:
        for (const std::string& item : lists[i]) text += (text.empty() ? "" : ",") + item;
        break;
      case SettingShape::kSwitch:
        text = switches[i] ? "true" : "false";
        break;
    }
    const std::string why = row.parse(text, *o);
    if (why.empty()) continue;
    // A value from the file is named by its file, line and column; one from a flag by the flag.
    const std::optional<YAML::Mark> mark = yaml_config->where(row.flag);
    if (mark && !on_command_line(argc, argv, flag)) {
      std::cerr << "tollgated: "
                << ConfigError(o->config_file, mark->line + 1, mark->column + 1, "\"" + row.flag + "\" " + why).what()
                << "\n";
      return 2;
    }
    std::cerr << "tollgated: " << flag << " " << why << "\nRun with --help for the flags.\n";
    return 2;
  }
  // The clients share the host (one daemon per service host): a core is left to them. On two
  // cores a second daemon thread lost a third of the checks a local client got through
  // (docs/results.md, "The daemon on several threads").
  if (o->threads == 0) o->threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 2, 5) - 1;
  if (o->node_id.empty()) o->node_id = o->bind;

  auto usage_error = [](const std::string& why) {
    std::cerr << "tollgated: " << why << "\nRun with --help for the flags.\n";
    return 2;
  };
  if (!o->rules_file.empty() && !o->rules_url.empty()) {
    return usage_error(
        "--rules and --rules-url contradict each other: the rules come from a file or from a rules service");
  }
  if (!o->rules_url.empty()) {
    std::string why;
    const auto url = parse_http_url(o->rules_url, &why);
    if (!url) return usage_error("--rules-url " + o->rules_url + " " + why);
    if (!o->rules_ca.empty() && !url->tls) return usage_error("--rules-ca is for an https:// --rules-url");
    if (o->rules_cache.empty()) {
      return usage_error(
          "--rules-url needs --rules-cache FILE: the last good rules, so that a restart while the rules "
          "service is down still starts with rules");
    }
  } else if (!o->rules_cache.empty() || !o->rules_ca.empty()) {
    return usage_error(std::string(o->rules_cache.empty() ? "--rules-ca" : "--rules-cache") +
                       " is for --rules-url (a --rules file is its own copy)");
  }
  const bool rls_configured = !o->rls_config.empty() || !o->rls_xds.empty();
  if (o->rules_file.empty() && o->rules_url.empty() && !rls_configured) {
    return usage_error(
        "--rules FILE or --rules-url URL is required (or --rls-config PATH or --rls-xds HOST:PORT, to serve "
        "Envoy's rate limit service only)");
  }
  if (!o->rls_listen.empty() && !rls_configured) {
    return usage_error("--rls-listen needs --rls-config PATH or --rls-xds HOST:PORT");
  }
  if (!o->rls_config.empty() && !o->rls_xds.empty()) {
    return usage_error("--rls-config and --rls-xds are two sources of one RLS config: give one");
  }
  const bool xds_tls = !o->rls_xds_tls_ca.empty() || !o->rls_xds_tls_cert.empty() || !o->rls_xds_tls_key.empty() ||
                       !o->rls_xds_tls_server_name.empty();
  if (o->rls_xds.empty() && (xds_tls || o->rls_xds_insecure || !o->rls_xds_node_metadata.empty() ||
                             !o->rls_xds_headers.empty() || o->rls_xds_node_id != "default")) {
    return usage_error("--rls-xds-* settings are for --rls-xds HOST:PORT");
  }
  if (o->rls_xds_tls_cert.empty() != o->rls_xds_tls_key.empty()) {
    return usage_error("--rls-xds-tls-cert and --rls-xds-tls-key go together: a certificate and its private key");
  }
  if (xds_tls && o->rls_xds_tls_ca.empty()) {
    return usage_error("--rls-xds-tls-* need --rls-xds-tls-ca (the CA the xDS server's certificate chains to)");
  }
  if (o->rls_xds_insecure && !o->rls_xds_tls_ca.empty()) {
    return usage_error("--rls-xds-insecure and --rls-xds-tls-ca contradict each other: TLS or not");
  }
  if (!o->rls_xds.empty() && o->rls_xds_tls_ca.empty() && !o->rls_xds_insecure) {
    const auto at = api::parse_endpoint("tcp:" + o->rls_xds, nullptr);
    if (!o->rls_xds.starts_with("localhost:") && (!at || !at->is_loopback())) {
      return usage_error("--rls-xds " + o->rls_xds +
                         " is not loopback: give --rls-xds-tls-ca (TLS), or --rls-xds-insecure to take every limit "
                         "from whoever answers at that address");
    }
  }
  if (o->rls_config_optional && o->rls_config.empty()) {
    return usage_error("--rls-config-optional is for --rls-config PATH (start before the file exists)");
  }
  if (o->rls_limit_header_names.size() != 3) {
    return usage_error("--rls-limit-header-names takes three names, LIMIT,REMAINING,RESET; got " +
                       std::to_string(o->rls_limit_header_names.size()));
  }
  const bool rls_tls = !o->rls_tls_cert.empty() || !o->rls_tls_key.empty() || !o->rls_tls_client_ca.empty();
  if (o->rls_listen.empty() && (rls_tls || o->rls_insecure)) {
    return usage_error(std::string(o->rls_insecure ? "--rls-insecure" : "--rls-tls-*") + " is for --rls-listen");
  }
  if (o->rls_tls_cert.empty() != o->rls_tls_key.empty()) {
    return usage_error("--rls-tls-cert and --rls-tls-key go together: a certificate and its private key");
  }
  if (!o->rls_tls_client_ca.empty() && o->rls_tls_cert.empty()) {
    return usage_error("--rls-tls-client-ca (mutual TLS) needs the server's own --rls-tls-cert and --rls-tls-key");
  }
  if (o->rls_insecure && !o->rls_tls_client_ca.empty()) {
    return usage_error(
        "--rls-insecure and --rls-tls-client-ca contradict each other: clients need a certificate or do not");
  }
  if (o->http_listen.empty() && (!o->http_token_file.empty() || o->http_insecure)) {
    return usage_error(std::string(o->http_insecure ? "--http-insecure" : "--http-token-file") +
                       " is for --http-listen");
  }
  if (o->http_insecure && !o->http_token_file.empty()) {
    return usage_error("--http-insecure and --http-token-file contradict each other: HTTP needs a token or does not");
  }
  if (o->rls_listen.empty() && o->http_listen.empty() && rls_configured) {
    return usage_error(std::string(o->rls_xds.empty() ? "--rls-config" : "--rls-xds") +
                       " is used by the rate limit service: give --rls-listen HOST:PORT (gRPC) or "
                       "--http-listen HOST:PORT (POST /json) too");
  }
  if (o->node.membership == MembershipKind::kStatic && o->peers_file.empty()) {
    return usage_error("--membership static needs --peers-file FILE");
  }
  if (o->node.membership == MembershipKind::kHeartbeat && o->seeds.empty()) {
    return usage_error(
        "--membership heartbeat needs --seeds HOST:PORT,... (list this node's own address to start a cluster)");
  }
  if (const SettingProblem p = validate(o->node, SettingNames::kFlags); !p.message.empty())
    return usage_error(p.message);
  if (o->listen.empty()) return usage_error("--listen needs at least one endpoint");
  // A departed member is forgotten after --forget-after; a message of its from before must be
  // stale by then, or a replay would bring it back.
  if (o->max_message_age_ns < kNanosPerSecond || 2 * o->max_message_age_ns > o->node.forget_after_ns) {
    return usage_error("--max-message-age " + format_duration(o->max_message_age_ns) +
                       " must be at least 1s and at most half of --forget-after (" +
                       format_duration(o->node.forget_after_ns) + ")");
  }
  if (!o->cluster_key_file.empty() && o->insecure_gossip) {
    return usage_error(
        "--insecure-gossip and --cluster-key-file contradict each other: give one (the flag or the "
        "config file's key)");
  }
  if (o->cluster_key_file.empty() && !o->insecure_gossip) {
    return usage_error(
        "gossip must be authenticated: give --cluster-key-file FILE, the same key on every node (make one with "
        "`(umask 077; tollgate keygen > FILE)`), or --insecure-gossip to run without (then anyone who can send "
        "to the gossip port controls this node's limits)");
  }
  // 250: a relaying member's batches are named by its id and kRelayOriginSuffix, and an origin
  // on the wire is at most 256 bytes; a NUL would make that name ambiguous.
  if (o->node_id.empty() || o->node_id.size() > 250) return usage_error("--node-id must be 1 to 250 bytes");
  if (o->node_id.find('\0') != std::string::npos) return usage_error("--node-id must not contain a NUL byte");
  if (o->bind.size() > 256) return usage_error("--bind must be at most 256 bytes");
  return std::nullopt;
}

bool checks_from_any_thread(const DaemonOptions& o) {
  return o.threads > 1 || !o.http_listen.empty() || !o.rls_listen.empty();
}

NodeHostOptions node_host_options(const DaemonOptions& d) {
  NodeHostOptions h;
  h.node_id = d.node_id;
  h.bind = d.bind;
  h.transport = d.transport;
  h.max_datagram = d.max_datagram;
  h.gossip_peer_bytes_per_second = d.gossip_peer_bytes_per_second;
  h.max_message_age_ns = d.max_message_age_ns;
  h.cluster_key_file = d.cluster_key_file;
  h.peers_file = d.peers_file;
  h.seeds = d.seeds;
  h.rules_file = d.rules_file;
  h.rls_config = d.rls_config;
  h.rls_merge_domains = d.rls_merge_domains;
  h.rls_shadow_mode = d.rls_shadow_mode;
  h.rls_quota_mode = d.rls_quota_mode;
  h.rls_config_optional = d.rls_config_optional;
  h.rls_dynamic = !d.rls_xds.empty();
  h.node = d.node;
  h.incarnation = d.incarnation;
  h.state_dir = d.state_dir;
  h.state_interval_ns = d.state_interval_ns;
  // Checks from every client API thread at once (the node's thread seals what they leave
  // pending when a flood of keys asks for it).
  h.concurrent_checks = checks_from_any_thread(d);
  return h;
}

}  // namespace tollgate
