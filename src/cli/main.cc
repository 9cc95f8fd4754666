// `tollgate`: the command-line client of the local tollgated.
//
//   tollgate [--endpoint unix:PATH|tcp:HOST:PORT] [--timeout 1s] check KEY [--cost N] [--json]
//   tollgate members [--json]
//   tollgate stats [--json]
//   tollgate top [--rule R] [-k N] [--watch [--interval 2s] [--times N]] [--json]
//   tollgate rules check FILE [--rls]      (offline: no daemon is asked)
//   tollgate rules show [--json]           (the daemon's rules version, reloads and polls)
//   tollgate admin faults [--drop-to ID,...] [--drop-from ID,...] [--loss P] [--delay 100ms]
//                         [--duplicate P] | --clear
//
// Unlike a service, the CLI fails closed: a daemon that cannot be reached is an error (exit 2),
// never a made-up decision.
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cli/output.h"
#include "codec/cluster_key.h"
#include "config/content_version.h"
#include "config/read_file.h"
#include "json/json.h"
#include "tollgate/client.h"
#include "tollgate/duration.h"
#include "tollgate/rls_config_file.h"
#include "tollgate/rules_file.h"
#include "util/closest.h"
#include "util/printable.h"

namespace {

using tollgate::cli::kExitAllowed;
using tollgate::cli::kExitDenied;
using tollgate::cli::kExitError;

int fail(const std::string& message) {
  std::cerr << "tollgate: " << message << "\n";
  return kExitError;
}

std::vector<std::string> without_empty(std::vector<std::string> ids) {
  std::erase(ids, std::string());
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tollgate: ask the local tollgated for admission decisions, members and stats.\n"
      "Exit status: 0 success (check: allowed), 1 check denied, 2 error (including an\n"
      "unreachable daemon: the CLI never falls back to a made-up decision)."};
  app.name("tollgate");
  app.set_version_flag("--version", "tollgate " TOLLGATE_VERSION);
  app.require_subcommand(1);
  app.fallthrough();  // global options are accepted after the subcommand too

  std::string endpoint(tollgate::kDefaultEndpoint);
  app.add_option("--endpoint", endpoint,
                 "Daemon API endpoint: unix:PATH or tcp:HOST:PORT (HOST an IP address or localhost)")
      ->envname(std::string(tollgate::kEndpointEnvVar))
      ->capture_default_str();
  std::string timeout_text = "1s";
  app.add_option("--timeout", timeout_text,
                 "How long to wait for the daemon: a whole number and a unit (ms, s, m; also ns, us, h), e.g. 500ms")
      ->capture_default_str();

  bool json = false;

  CLI::App* check = app.add_subcommand("check", "Check (and take) tokens for KEY; exit 0 allowed, 1 denied");
  std::string key;
  int64_t cost = 1;
  check->add_option("KEY", key, "The key to check")->required();
  check->add_option("--cost", cost, "Tokens to take (0 asks without taking)")
      ->check(CLI::Range(int64_t{0}, tollgate::kMaxTokens))  // a usage error (exit 2), as HTTP's 400: not a denial
      ->capture_default_str();
  check->add_flag("--json", json, "Print one line of JSON");

  CLI::App* members = app.add_subcommand("members", "List every member the daemon knows, itself included");
  members->add_flag("--json", json, "Print {\"members\": [{id, address, state, incarnation, last_heard_ms}]}");

  CLI::App* top = app.add_subcommand(
      "top",
      "Who is being limited, cluster-wide: per rule (busiest first), the keys with the most denied checks and the "
      "most tokens admitted over the last one to two --top-window, merged from every live member's summary. A count "
      "shown as LOW..HIGH is bounded, not estimated: the key's true count lies between (docs/design.md 7.8)");
  std::string top_rule;
  size_t top_k = tollgate::kDefaultTopKeys;
  bool top_watch = false;
  std::string top_interval_text = "2s";
  size_t top_times = 0;
  top->add_option("--rule", top_rule,
                  "One rule, by its match as /metrics labels it (e.g. user:*); default: every rule");
  top->add_option("-k", top_k, "Keys per list")
      ->check(CLI::Range(size_t{1}, tollgate::kMaxTopKeys))
      ->capture_default_str();
  top->add_flag("--watch", top_watch, "Ask again every --interval and redraw, until interrupted (Ctrl-C)");
  top->add_option("--interval", top_interval_text, "With --watch: how often to ask, a duration (500ms, 2s)")
      ->capture_default_str();
  top->add_option("--times", top_times, "With --watch: stop after this many answers (0: never)")->capture_default_str();
  top->add_flag("--json", json,
                "Print {\"rules\": [{rule, members_reporting, denied, tokens}]} as GET /v1/top does, one line per "
                "answer");

  CLI::App* stats = app.add_subcommand("stats", "Print the daemon's counters");
  stats->add_flag("--json", json, "Print {\"stats\": {name: value, ...}}");

  CLI::App* keygen = app.add_subcommand(
      "keygen",
      "Print a new random cluster key (32 bytes, hex) for tollgated --cluster-key-file; no daemon is asked.\n"
      "Make the file readable by tollgated alone, e.g.: (umask 077; tollgate keygen > /etc/tollgate/cluster.key)");

  CLI::App* rules = app.add_subcommand("rules", "Rules: check a file offline, or show what a daemon has in force");
  rules->require_subcommand(1);
  CLI::App* rules_check = rules->add_subcommand(
      "check",
      "Validate a rules file (or with --rls an envoyproxy/ratelimit config file or directory) as tollgated would "
      "load it, without asking a daemon: exit 0 and a summary with the file's version (tollgated's rules_version), "
      "or exit 1 and FILE:LINE:COLUMN: problem. For CI pipelines that publish rules");
  std::string rules_path;
  bool rules_rls = false;
  rules_check->add_option("PATH", rules_path, "The file (or, with --rls, a file or directory)")->required();
  rules_check->add_flag("--rls", rules_rls, "PATH is an RLS config (tollgated --rls-config), not a rules file");
  CLI::App* rules_show = rules->add_subcommand(
      "show",
      "Ask the daemon which rules are in force: their version (as `rules check` prints it for a file), reloads "
      "done and refused, and with --rules-url the polls of the rules service");
  rules_show->add_flag("--json", json, "Print {\"stats\": {...}} with the rules counters only");

  CLI::App* reset = app.add_subcommand(
      "reset",
      "Make KEY full again at every node within a round or two; what was admitted before a node heard of the "
      "reset does not count against the fresh bucket (docs/design.md 6.6)");
  std::string reset_key;
  reset->add_option("KEY", reset_key, "The key to reset")->required();
  reset->add_flag("--json", json, "Print {\"key\": ..., \"limited\": ..., \"remaining\": ...}");

  CLI::App* admin = app.add_subcommand("admin", "Administrative commands");
  admin->require_subcommand(1);
  CLI::App* faults = admin->add_subcommand("faults",
                                           "Set the daemon's fault injection (tests and simulation); "
                                           "replaces all previous settings");
  std::vector<std::string> drop_to;
  std::vector<std::string> drop_from;
  double loss = 0;
  double duplicate = 0;
  std::string delay_text;
  bool clear = false;
  auto* drop_to_opt =
      faults->add_option("--drop-to", drop_to, "Node ids to stop sending to (comma-separated)")->delimiter(',');
  auto* drop_from_opt =
      faults->add_option("--drop-from", drop_from, "Node ids whose messages to drop (comma-separated)")->delimiter(',');
  auto* loss_opt = faults->add_option("--loss", loss, "Probability in [0, 1] that a message is dropped")
                       ->check(CLI::Range(0.0, 1.0));
  auto* delay_opt = faults->add_option("--delay", delay_text,
                                       "Delay added to every message sent: a duration (100ms, 1s) or a number "
                                       "of milliseconds; whole milliseconds (finer is rounded down)");
  auto* duplicate_opt =
      faults->add_option("--duplicate", duplicate, "Probability in [0, 1] that a message is sent twice")
          ->check(CLI::Range(0.0, 1.0));
  std::string jitter_text;
  auto* jitter_opt = faults->add_option("--jitter", jitter_text,
                                        "Plus a random delay in [0, JITTER] per message, so messages arrive out of "
                                        "order: a duration (50ms) or a number of milliseconds");
  faults->add_flag("--clear", clear, "Remove every fault")
      ->excludes(drop_to_opt)
      ->excludes(drop_from_opt)
      ->excludes(loss_opt)
      ->excludes(delay_opt)
      ->excludes(duplicate_opt)
      ->excludes(jitter_opt);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help: prints it
    // A mistyped command: CLI11 would only say that one is required; say which was meant instead.
    std::vector<std::string> commands;
    for (const CLI::App* sub : app.get_subcommands({})) commands.push_back(sub->get_name());
    for (int i = 1; i < argc; ++i) {
      const std::string word = argv[i];
      if (word.starts_with("-") || std::find(commands.begin(), commands.end(), word) != commands.end()) continue;
      if (std::string near = tollgate::closest_name(word, commands); !near.empty()) {
        std::cerr << "tollgate: unknown command \"" << word << "\"; did you mean \"" << near
                  << "\"? (tollgate --help lists the commands)\n";
        return kExitError;
      }
    }
    app.exit(e);  // prints the error
    return kExitError;
  }

  if (*keygen) {
    try {
      std::cout << "# tollgate cluster key: give this file to every tollgated as --cluster-key-file\n"
                << tollgate::generate_cluster_key_hex() << "\n";
    } catch (const std::exception& e) {
      return fail(e.what());
    }
    std::cout.flush();
    return std::cout ? 0 : fail("cannot write the key to standard output");
  }

  if (*rules_check) {
    try {
      if (rules_rls) {
        const auto config = tollgate::load_rls_config(rules_path);
        std::cout << rules_path << ": valid RLS config: " << config->domains().size() << " domain"
                  << (config->domains().size() == 1 ? "" : "s") << ", " << config->limit_count()
                  << " limited descriptor" << (config->limit_count() == 1 ? "" : "s") << "\n";
        return 0;
      }
      const std::string text = tollgate::read_config_file(rules_path, "rules file");
      const auto set = tollgate::parse_rules(text, rules_path);
      std::cout << rules_path << ": valid: " << set->rules().size() << " rule" << (set->rules().size() == 1 ? "" : "s")
                << ", " << (set->default_limit() ? "a default limit" : "no default (unmatched keys are not limited)")
                << "; version " << tollgate::content_version(text) << "\n";
      return 0;
    } catch (const tollgate::ConfigError& e) {
      std::cerr << e.what() << "\n";
      return kExitDenied;  // 1: the file is invalid
    } catch (const std::exception& e) {
      return fail(e.what());
    }
  }

  std::string error;
  const std::optional<int64_t> timeout_ns = tollgate::parse_duration_ns(timeout_text, &error);
  if (!timeout_ns) return fail("--timeout: " + error);

  tollgate::ClientOptions options;
  options.endpoint = endpoint;
  options.deadline = std::chrono::nanoseconds(*timeout_ns);
  options.admin_timeout = std::chrono::nanoseconds(*timeout_ns);
  options.connect_timeout = std::chrono::nanoseconds(*timeout_ns);
  options.fail_open = false;
  std::optional<tollgate::Client> client;
  try {
    client.emplace(options);
  } catch (const std::invalid_argument& e) {
    return fail(std::string("--endpoint: ") + e.what());
  }

  if (check->parsed()) {
    const tollgate::CheckReply reply = client->check(key, cost);
    if (!reply.from_daemon()) return fail(reply.error);
    std::cout << (json ? tollgate::cli::format_check_json(key, cost, reply)
                       : tollgate::cli::format_check_text(key, cost, reply));
    return reply.allowed ? kExitAllowed : kExitDenied;
  }
  if (members->parsed()) {
    auto list = client->members(&error);
    if (!list) return fail(error);
    std::cout << (json ? tollgate::json::format_members_json(*list) : tollgate::cli::format_members_text(*list));
    return 0;
  }
  if (rules_show->parsed()) {
    auto list = client->stats(&error);
    if (!list) return fail(error);
    std::erase_if(*list, [](const auto& s) { return !s.first.starts_with("rules_"); });
    if (json) {
      std::cout << tollgate::json::format_stats_json(*list);
      return 0;
    }
    auto value = [&](std::string_view name) -> int64_t {
      for (const auto& [n, v] : *list) {
        if (n == name) return v;
      }
      return 0;
    };
    if (value("rules_version") == 0) {
      std::cout << "no rules file in force (the daemon serves the RLS config alone)\n";
    } else {
      std::cout << "rules version " << value("rules_version") << "\n";
    }
    std::cout << "reloads: " << value("rules_reloads") << " applied, " << value("rules_reload_failures")
              << " refused (the rules in force stayed)\n";
    if (value("rules_polls") > 0) {
      std::cout << "rules service polls: " << value("rules_polls") << ", " << value("rules_polls_not_modified")
                << " unchanged, " << value("rules_poll_failures")
                << " failed; cache writes failed: " << value("rules_cache_write_failures") << "\n";
    }
    return 0;
  }
  if (top->parsed()) {
    const std::optional<int64_t> interval_ns = tollgate::parse_duration_ns(top_interval_text, &error);
    if (!interval_ns || *interval_ns <= 0) return fail("--interval: " + (error.empty() ? "must be above 0" : error));
    const bool redraw = top_watch && !json && isatty(STDOUT_FILENO) == 1;
    for (size_t answers = 1;; ++answers) {
      auto tops = client->top(top_rule, top_k, &error);
      if (!tops) return fail(error);
      if (redraw) std::cout << "\x1b[H\x1b[2J";  // home, clear: one screen per answer
      std::cout << (json ? tollgate::json::format_top_json(*tops) : tollgate::cli::format_top_text(*tops));
      if (!top_watch || answers == top_times) break;
      if (!json) std::cout << "\n";
      std::cout.flush();
      std::this_thread::sleep_for(
          std::chrono::nanoseconds(*interval_ns));  // the refresh interval, not a wait for state
    }
    return 0;
  }
  if (stats->parsed()) {
    auto list = client->stats(&error);
    if (!list) return fail(error);
    std::cout << (json ? tollgate::json::format_stats_json(*list) : tollgate::cli::format_stats_text(*list));
    return 0;
  }
  if (reset->parsed()) {
    const tollgate::ResetReply r = client->reset(reset_key);
    if (!r.error.empty()) return fail(r.error);
    if (json) {
      std::cout << "{\"key\": " << tollgate::json::json_string(reset_key)
                << ", \"limited\": " << (r.limited ? "true" : "false") << ", \"remaining\": " << r.remaining << "}\n";
    } else if (r.limited) {
      std::cout << "reset " << tollgate::printable(reset_key) << ": full again (" << r.remaining
                << " tokens); every node within a round or two\n";
    } else {
      std::cout << "reset " << tollgate::printable(reset_key)
                << ": no rule governs it at this daemon; the reset goes to every node all the same\n";
    }
    return 0;
  }
  if (faults->parsed()) {
    tollgate::FaultSettings settings;
    const bool any = !drop_to.empty() || !drop_from.empty() || loss_opt->count() > 0 || delay_opt->count() > 0 ||
                     duplicate_opt->count() > 0;
    if (!any && !clear) return fail("admin faults: nothing to set; give a fault option, or --clear to remove all");
    if (!clear) {
      settings.drop_to = without_empty(drop_to);
      settings.drop_from = without_empty(drop_from);
      settings.loss = loss;
      settings.duplicate = duplicate;
      for (auto [text, target, flag] : {std::tuple{&delay_text, &settings.delay_ms, "--delay"},
                                        std::tuple{&jitter_text, &settings.jitter_ms, "--jitter"}}) {
        if (text->empty()) continue;
        const bool bare_number = text->find_first_not_of("0123456789") == std::string::npos;
        const std::optional<int64_t> ns = tollgate::parse_duration_ns(bare_number ? *text + "ms" : *text, &error);
        if (!ns) return fail(std::string(flag) + ": " + error);
        *target = *ns / 1'000'000;
      }
    }
    const std::string result = client->set_faults(settings);
    if (!result.empty()) return fail(result);
    std::cout << (clear ? "faults cleared\n" : "faults set\n");
    return 0;
  }
  return fail("no command given");  // unreachable: require_subcommand(1)
}
