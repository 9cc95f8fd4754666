// Reading a scenario (sim/scenario.h). Two layers:
// - the timeline grammar: one line of text -> Event (parse_event), std::invalid_argument saying
//   what was expected;
// - the YAML file (ScenarioParser): fields and their values, then the checks that need the whole
//   timeline (node indices after joins, faults of one kind overlapping), as ConfigError
//   "file:line:col: problem".
//
// Timeline semantics settled here (the simulator relies on them):
// - A partition lists every node that exists when it starts in exactly one group; a node in no
//   group or in two is an error (no implicit "rest" group).
// - Nodes that join get the next indices (nodes, nodes+1, ...) and may be named by events at or
//   after their join. At equal times joins come first in `timeline`, which is otherwise sorted by
//   at_ns in file order (stable).
// - An event is in force over [at, until) (for ever without an end). One partition at a time, one
//   loss event at a time, a node cannot crash while it is down, and no join while a partition is
//   in force (which side would the new nodes be on?). All of these are errors, not guesses.
#include "scenario.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <set>
#include <span>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "config/node_settings.h"
#include "config/strict_yaml.h"
#include "tollgate/config_error.h"
#include "tollgate/duration.h"
#include "tollgate/limit.h"
#include "tollgate/rules_file.h"

namespace tollgate::sim {
namespace {

// The most nodes a run may have, joins included (the same bound as tollgate-sim --nodes).
constexpr size_t kMaxNodes = 100'000;

std::string quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::vector<std::string> split_words(std::string_view s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_space(s[i])) ++i;
    const size_t start = i;
    while (i < s.size() && !is_space(s[i])) ++i;
    if (i > start) out.emplace_back(s.substr(start, i - start));
  }
  return out;
}

// A whole number of digits only (no sign, no spaces), or nullopt.
template <typename Int>
std::optional<Int> parse_whole(std::string_view text) {
  if (text.empty() || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  Int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

// "20%", "0.5%", "100%" -> a probability in [0, 1]. Empty string when fine, else the problem.
std::string parse_percent(std::string_view text, double* probability) {
  const std::string expected = "expected a percentage from 0% to 100%, like 20% or 0.5%, got " + quoted(text);
  if (text.size() < 2 || text.back() != '%') return expected;
  const std::string_view number = text.substr(0, text.size() - 1);
  const size_t dot = number.find('.');
  const auto digits = [](std::string_view d) {
    return !d.empty() && std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (!digits(number.substr(0, dot)) || (dot != std::string_view::npos && !digits(number.substr(dot + 1)))) {
    return expected;
  }
  double v = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
  if (ec != std::errc() || end != number.data() + number.size() || v > 100) return expected;
  *probability = v / 100;
  return "";
}

// "0-3,5" as written: inclusive ranges, checked against the node count later.
struct NodeRange {
  size_t first = 0, last = 0;
};
using GroupSpec = std::vector<NodeRange>;

// An event as the grammar reads it, before its node indices are checked against the cluster
// size at its time (which depends on the joins before it).
struct ParsedEvent {
  Event event;
  std::vector<GroupSpec> groups;  // kPartition, as written
};

// "3 4 6-7" -> "3, 4, 6-7": a sorted index list, runs shortened to ranges, at most `max_runs`.
std::string describe_indices(const std::vector<size_t>& sorted, size_t max_runs = 8) {
  std::string out;
  size_t runs = 0;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (++runs > max_runs) return out + ", ...";
    out += (out.empty() ? "" : ", ") + std::to_string(sorted[i]) + (j > i ? "-" + std::to_string(sorted[j]) : "");
    i = j + 1;
  }
  return out;
}

std::string describe_cluster(size_t nodes) {
  return nodes == 1 ? "1 node (0)" : std::to_string(nodes) + " nodes (0-" + std::to_string(nodes - 1) + ")";
}

// Reads the words of one timeline line left to right; every error quotes the line.
class EventWords {
 public:
  EventWords(std::string line, std::vector<std::string> words) : line_(std::move(line)), words_(std::move(words)) {}

  [[noreturn]] void fail(const std::string& why) const { throw std::invalid_argument(quoted(line_) + ": " + why); }

  bool done() const { return next_ >= words_.size(); }
  const std::string& peek() const { return words_[next_]; }

  // The next word; `expected` says what it should be when there is none.
  const std::string& take(const std::string& expected) {
    if (done()) fail("expected " + expected + ", but the line ends");
    return words_[next_++];
  }
  void expect(const char* word, const std::string& after) {
    const std::string expected = quoted(word) + " after " + after;
    if (done()) fail("expected " + expected + ", but the line ends");
    if (words_[next_] != word) fail("expected " + expected + ", got " + quoted(words_[next_]));
    ++next_;
  }
  void expect_end(const std::string& what_may_follow) {
    if (done()) return;
    fail("unexpected " + quoted(words_[next_]) + "; expected " +
         (what_may_follow.empty() ? "" : what_may_follow + " or ") + "the end of the line");
  }

  int64_t time(const std::string& after) {
    const std::string& text = take("a time after " + after + ", like 10s");
    std::string why;
    const auto ns = parse_duration_ns(text, &why);
    if (!ns) fail(why);
    return *ns;
  }
  // "for D" -> at + D, which must be after `at`.
  int64_t end_after(int64_t at) {
    const std::string& text = take("a duration after \"for\", like 20s");
    std::string why;
    const auto ns = parse_duration_ns(text, &why);
    if (!ns) fail(why);
    if (*ns == 0) fail("\"for\" must be longer than 0s");
    if (*ns > INT64_MAX - at) fail("the event would end too late");
    return at + *ns;
  }

 private:
  std::string line_;
  std::vector<std::string> words_;
  size_t next_ = 0;
};

constexpr const char* kGrammar =
    "partition G|G[|G...] at T [for D]; loss P% from T [for D]; crash node I at T[, restart at T2]; "
    "stop node I at T[, restart at T2]; join K nodes at T";

// "0-3,5|4,6-7" -> groups of ranges.
std::vector<GroupSpec> parse_groups(const std::string& spec, const EventWords& words) {
  std::vector<GroupSpec> groups;
  size_t begin = 0;
  while (true) {
    const size_t bar = spec.find('|', begin);
    const std::string_view group =
        std::string_view(spec).substr(begin, bar == std::string::npos ? std::string::npos : bar - begin);
    if (group.empty())
      words.fail("empty group in " + quoted(spec) + ": expected node indices like 0-3,5 between the |");
    GroupSpec ranges;
    size_t item_begin = 0;
    while (true) {
      const size_t comma = group.find(',', item_begin);
      const std::string_view item =
          group.substr(item_begin, comma == std::string_view::npos ? std::string_view::npos : comma - item_begin);
      const size_t dash = item.find('-');
      const auto first = parse_whole<size_t>(item.substr(0, dash));
      const auto last = dash == std::string_view::npos ? first : parse_whole<size_t>(item.substr(dash + 1));
      if (!first || !last)
        words.fail("expected a node index or a range like 0-3, got " + quoted(item) + " in " + quoted(spec));
      if (*last < *first) words.fail("range " + quoted(item) + " runs backwards");
      ranges.push_back({*first, *last});
      if (comma == std::string_view::npos) break;
      item_begin = comma + 1;
    }
    groups.push_back(std::move(ranges));
    if (bar == std::string::npos) break;
    begin = bar + 1;
  }
  if (groups.size() < 2) words.fail("a partition needs at least two groups separated by |, like 0-3|4-7");
  return groups;
}

// The grammar alone: every word, time and percentage; node indices are checked by check_nodes.
ParsedEvent parse_event_syntax(std::string_view raw) {
  const std::string line(trim(raw));
  const std::vector<std::string> plain = split_words(line);
  ParsedEvent parsed;
  Event& e = parsed.event;
  e.text = line;
  if (plain.empty()) throw std::invalid_argument("empty timeline entry: expected one of: " + std::string(kGrammar));
  const std::string& kind = plain[0];

  if (kind == "partition") {
    e.kind = Event::Kind::kPartition;
    EventWords words(line, plain);
    words.take("partition");
    // The groups are the words made of digits - , | up to "at", so "0-3 | 4-7" reads like "0-3|4-7".
    const auto is_group_word = [](const std::string& w) {
      return std::all_of(w.begin(), w.end(),
                         [](char c) { return (c >= '0' && c <= '9') || c == '-' || c == ',' || c == '|'; });
    };
    std::string spec;
    while (!words.done() && is_group_word(words.peek())) spec += words.take("");
    if (spec.empty()) words.fail("expected groups like 0-3|4-7 after \"partition\"");
    parsed.groups = parse_groups(spec, words);
    words.expect("at", "the groups");
    e.at_ns = words.time("\"at\"");
    if (!words.done()) {
      words.expect("for", "the time");
      e.until_ns = words.end_after(e.at_ns);
    }
    words.expect_end(e.until_ns ? "" : "\"for D\"");
  } else if (kind == "loss") {
    e.kind = Event::Kind::kLoss;
    EventWords words(line, plain);
    words.take("loss");
    const std::string& percent = words.take("a percentage after \"loss\", like 20%");
    if (const std::string why = parse_percent(percent, &e.loss); !why.empty()) words.fail(why);
    words.expect("from", "the percentage");
    e.at_ns = words.time("\"from\"");
    if (!words.done()) {
      words.expect("for", "the time");
      e.until_ns = words.end_after(e.at_ns);
    }
    words.expect_end(e.until_ns ? "" : "\"for D\"");
  } else if (kind == "crash" || kind == "stop") {
    e.kind = Event::Kind::kCrash;
    e.graceful = kind == "stop";
    // The comma before "restart" is a word of its own wherever the spaces are.
    std::string spaced = line;
    if (const size_t comma = spaced.find(','); comma != std::string::npos) spaced.replace(comma, 1, " , ");
    EventWords words(line, split_words(spaced));
    words.take(kind);
    words.expect("node", quoted(kind));
    const std::string& index = words.take("a node index after \"node\"");
    const auto node = parse_whole<size_t>(index);
    if (!node) words.fail("expected a node index after \"node\", got " + quoted(index));
    e.node = *node;
    words.expect("at", "the node index");
    e.at_ns = words.time("\"at\"");
    if (!words.done()) {
      words.expect(",", "the time (then \"restart at T\")");
      words.expect("restart", "the comma");
      words.expect("at", "\"restart\"");
      e.until_ns = words.time("\"restart at\"");
      if (*e.until_ns <= e.at_ns) words.fail("the restart must come after the " + kind);
    }
    words.expect_end(e.until_ns ? "" : "\", restart at T\"");
  } else if (kind == "join") {
    e.kind = Event::Kind::kJoin;
    EventWords words(line, plain);
    words.take("join");
    const std::string& count = words.take("how many nodes after \"join\"");
    const auto k = parse_whole<size_t>(count);
    if (!k || *k == 0 || *k > kMaxNodes) {
      words.fail("expected how many nodes join, from 1 to " + std::to_string(kMaxNodes) + ", got " + quoted(count));
    }
    e.count = *k;
    const std::string& noun = words.take("\"nodes\" after the count");
    if (noun != "nodes" && noun != "node") words.fail("expected \"nodes\" after the count, got " + quoted(noun));
    words.expect("at", quoted(noun));
    e.at_ns = words.time("\"at\"");
    if (!words.done()) words.fail("unexpected " + quoted(words.peek()) + " after the time; a join has no end");
  } else if (kind == "restart") {
    throw std::invalid_argument(
        quoted(line) +
        ": a restart belongs to its crash, on one line: "
        "\"crash node I at T, restart at T2\" or \"stop node I at T, restart at T2\" (inside [ ] quote the entry: "
        "the comma splits it)");
  } else {
    throw std::invalid_argument(quoted(line) + ": unknown event " + quoted(kind) + "; expected one of: " + kGrammar);
  }
  return parsed;
}

// Checks the event's node indices against a cluster of `nodes` and fills Event::groups.
// `when` ends the messages that name the cluster's size (" at 30s, joins included").
void check_nodes(ParsedEvent& parsed, size_t nodes, const std::string& when = "") {
  Event& e = parsed.event;
  const auto fail = [&](const std::string& why) { throw std::invalid_argument(quoted(e.text) + ": " + why); };
  const std::string cluster = "the cluster has " + describe_cluster(nodes) + when;
  const auto check_index = [&](size_t i) {
    if (i >= nodes) fail("node " + std::to_string(i) + " does not exist: " + cluster);
  };
  if (e.kind == Event::Kind::kCrash) check_index(e.node);
  if (e.kind != Event::Kind::kPartition) return;
  std::vector<size_t> group_of(nodes, SIZE_MAX);
  e.groups.assign(parsed.groups.size(), {});
  for (size_t g = 0; g < parsed.groups.size(); ++g) {
    for (const NodeRange& r : parsed.groups[g]) {
      check_index(r.last);  // before expanding: a range never runs past the cluster
      for (size_t i = r.first; i <= r.last; ++i) {
        if (group_of[i] != SIZE_MAX) {
          fail("node " + std::to_string(i) +
               (group_of[i] == g ? " is listed twice in group " + std::to_string(g + 1)
                                 : " is in two groups; each node belongs to exactly one"));
        }
        group_of[i] = g;
        e.groups[g].push_back(i);
      }
    }
    std::sort(e.groups[g].begin(), e.groups[g].end());
  }
  std::vector<size_t> missing;
  for (size_t i = 0; i < nodes; ++i) {
    if (group_of[i] == SIZE_MAX) missing.push_back(i);
  }
  if (!missing.empty()) {
    fail((missing.size() == 1 ? "node " : "nodes ") + describe_indices(missing) +
         (missing.size() == 1 ? " is" : " are") + " in no group; every node must be in exactly one: " + cluster);
  }
}

}  // namespace

Event parse_event(std::string_view line, size_t nodes) {
  ParsedEvent parsed = parse_event_syntax(line);
  check_nodes(parsed, nodes);
  return std::move(parsed.event);
}

void validate(const Scenario& s) {
  size_t nodes = s.nodes;
  for (const Event& e : s.timeline) {  // sorted by time, joins first at one instant
    if (e.kind == Event::Kind::kJoin) {
      nodes += e.count;
      continue;
    }
    ParsedEvent parsed{e, {}};
    for (const std::vector<size_t>& group : e.groups) {
      GroupSpec ranges;
      for (size_t i : group) ranges.push_back({i, i});
      parsed.groups.push_back(std::move(ranges));
    }
    check_nodes(parsed, nodes, nodes == s.nodes ? "" : " at " + format_duration(e.at_ns) + ", joins included");
  }
}

std::vector<Phase> Scenario::phases() const {
  // Every event start and end is a boundary naming the phase that begins there. At one instant
  // ends come before starts, so an event that begins names the phase rather than one that ended;
  // among starts (or ends) the later one in the timeline names it.
  struct Boundary {
    int64_t at;
    bool starts;
    const char* name;
  };
  std::vector<Boundary> boundaries;
  for (const Event& e : timeline) {
    switch (e.kind) {
      case Event::Kind::kPartition:
        boundaries.push_back({e.at_ns, true, "partition"});
        if (e.until_ns) boundaries.push_back({*e.until_ns, false, "healed"});
        break;
      case Event::Kind::kLoss:
        boundaries.push_back({e.at_ns, true, "loss"});
        if (e.until_ns) boundaries.push_back({*e.until_ns, false, "loss-over"});
        break;
      case Event::Kind::kCrash:
        boundaries.push_back({e.at_ns, true, e.graceful ? "stopped" : "crashed"});
        if (e.until_ns) boundaries.push_back({*e.until_ns, false, "restarted"});
        break;
      case Event::Kind::kJoin:
        boundaries.push_back({e.at_ns, true, "joined"});
        break;
    }
  }
  std::stable_sort(boundaries.begin(), boundaries.end(), [](const Boundary& a, const Boundary& b) {
    return a.at != b.at ? a.at < b.at : !a.starts && b.starts;
  });

  std::vector<Phase> out;
  std::map<std::string, int, std::less<>> uses;  // name -> phases so named so far
  const auto add = [&](std::string_view phase, int64_t from, int64_t to) {
    from = std::max<int64_t>(from, 0);
    to = std::min(to, duration_ns);
    if (to <= from) return;  // zero-length phases are dropped (and use no suffix)
    const int n = ++uses[std::string(phase)];
    out.push_back({std::string(phase) + (n > 1 ? "-" + std::to_string(n) : ""), from, to});
  };
  std::string_view current = "steady";
  int64_t start = 0;
  for (const Boundary& b : boundaries) {
    if (b.at >= duration_ns) break;  // past the end of the run
    if (b.at > start) {
      add(current, start, b.at);
      start = b.at;
    }
    current = b.name;
  }
  add(current, start, duration_ns);
  return out;
}

namespace {

// A timeline entry, parsed, with where it is in the file.
struct PlacedEvent {
  ParsedEvent parsed;
  YAML::Mark mark;
};

class ScenarioParser {
 public:
  ScenarioParser(std::string_view text, const std::string& source) : text_(text), source_(source) {}

  Scenario parse() {
    const YAML::Node root = yaml::load(text_, source_);
    if (root.IsNull())
      throw ConfigError(source_, 0, 0, "empty scenario: expected a mapping with nodes, rules, load, timeline, ...");
    if (!root.IsMap()) fail(root, "a scenario is a mapping: name, nodes, mode, rules, load, timeline, ...");

    Scenario s;
    s.name = default_name();
    std::optional<YAML::Node> rules, timeline;
    std::map<std::string_view, YAML::Mark> setting_marks;  // node settings given, by flag
    std::vector<std::string> setting_keys;
    for (const NodeSettingField& f : node_setting_fields()) setting_keys.push_back(f.key());
    std::vector<std::string_view> fields = {"name", "nodes"};
    fields.insert(fields.end(), setting_keys.begin(), setting_keys.end());
    fields.insert(fields.end(), {"transport", "front_end", "duration", "seed", "state_interval", "top_check", "network",
                                 "rules", "load", "timeline"});
    for_each_field(root, fields, [&](const std::string& field, const YAML::Node& v) {
      for (const NodeSettingField& f : node_setting_fields()) {
        if (field != f.key()) continue;
        if (std::string why = f.parse(scalar(v, field), s.node); !why.empty()) fail(v, "`" + field + "` " + why);
        setting_marks[f.flag] = v.Mark();
        return;
      }
      if (field == "name") {
        s.name = scalar(v, field);
        if (s.name.empty()) fail(v, "`name` must not be empty");
      } else if (field == "nodes") {
        s.nodes = whole<size_t>(v, field, 1, kMaxNodes);
      } else if (field == "transport") {
        s.transport = choice(v, field, {"udp", "tcp"});
      } else if (field == "front_end") {
        s.front_end =
            choice(v, field, {"native", "rls"}) == "rls" ? Scenario::FrontEnd::kRls : Scenario::FrontEnd::kNative;
      } else if (field == "duration") {
        s.duration_ns = positive_duration(v, field);
      } else if (field == "seed") {
        s.seed = whole<uint64_t>(v, field, 0, UINT64_MAX);
      } else if (field == "state_interval") {
        s.state_interval_ns = positive_duration(v, field);
        if (s.state_interval_ns < kNanosPerSecond || s.state_interval_ns > 3600 * kNanosPerSecond)
          fail(v, "`state_interval` must be from 1s to 1h, as tollgated's --state-interval");
      } else if (field == "top_check") {
        s.top_check = whole<size_t>(v, field, 1, 100);
      } else if (field == "network") {
        parse_network(v, s.network);
      } else if (field == "rules") {
        rules = v;
      } else if (field == "load") {
        parse_load(v, s.load);
      } else {
        timeline = v;
      }
    });
    if (!rules)
      throw ConfigError(source_, 0, 0,
                        "no `rules:`: a scenario needs the limits it runs under, in the rules file's format");
    s.rules_yaml = parse_rules_block(root, *rules);
    if (timeline) s.timeline = parse_timeline(*timeline, s.nodes);
    if (const SettingProblem p = validate(s.node, SettingNames::kScenario); !p.message.empty()) {
      if (auto at = setting_marks.find(p.flag); at != setting_marks.end()) fail(at->second, p.message);
      throw ConfigError(source_, 0, 0, p.message);
    }
    return s;
  }

 private:
  [[noreturn]] void fail(const YAML::Node& at, const std::string& problem) const { fail(at.Mark(), problem); }
  [[noreturn]] void fail(const YAML::Mark& m, const std::string& problem) const { yaml::fail(source_, m, problem); }

  // The file name without directory and extension: the name of a scenario that gives none.
  std::string default_name() const {
    std::string base = source_.substr(source_.find_last_of('/') + 1);
    if (const size_t dot = base.rfind('.'); dot != std::string::npos && dot > 0) base.resize(dot);
    return base.empty() ? "scenario" : base;
  }

  template <typename Fn>
  void for_each_field(const YAML::Node& map, std::span<const std::string_view> allowed, Fn&& fn) const {
    yaml::for_each_field(source_, map, allowed, std::forward<Fn>(fn));
  }

  // A nested mapping (network, load); an empty value keeps every default.
  template <typename Fn>
  void for_each_nested_field(const YAML::Node& map, const std::string& field, std::span<const std::string_view> allowed,
                             Fn&& fn) const {
    if (map.IsNull()) return;
    if (!map.IsMap()) fail(map, "`" + field + "` must be a mapping of " + yaml::join(allowed));
    for_each_field(map, allowed, std::forward<Fn>(fn));
  }

  std::string scalar(const YAML::Node& v, const std::string& field) const {
    if (!v.IsScalar()) fail(v, "`" + field + "` must be a single value");
    return v.Scalar();
  }

  template <typename Int>
  Int whole(const YAML::Node& v, const std::string& field, Int min, Int max) const {
    const std::string text = scalar(v, field);
    const auto n = parse_whole<Int>(text);
    if (!n || *n < min || *n > max) {
      fail(v, "`" + field + "` must be a whole number from " + std::to_string(min) + " to " + std::to_string(max) +
                  ", got " + quoted(text));
    }
    return *n;
  }

  std::string choice(const YAML::Node& v, const std::string& field, std::initializer_list<const char*> options) const {
    const std::string text = scalar(v, field);
    std::string expected;  // "a, b or c"
    size_t i = 0;
    for (const char* o : options) {
      if (text == o) return text;
      if (i > 0) expected += i + 1 == options.size() ? " or " : ", ";
      expected += o;
      ++i;
    }
    fail(v, "`" + field + "` must be " + expected + ", got " + quoted(text));
  }

  int64_t positive_duration(const YAML::Node& v, const std::string& field) const {
    std::string why;
    const auto ns = parse_duration_ns(scalar(v, field), &why);
    if (!ns) fail(v, "`" + field + "`: " + why);
    if (*ns <= 0) fail(v, "`" + field + "` must be longer than 0s");
    return *ns;
  }

  double percent(const YAML::Node& v, const std::string& field) const {
    double p = 0;
    if (const std::string why = parse_percent(scalar(v, field), &p); !why.empty()) fail(v, "`" + field + "`: " + why);
    return p;
  }

  // "1ms-5ms" (uniform in [min, max]) or "2ms" (fixed).
  void latency(const YAML::Node& v, NetworkSpec& n) const {
    const std::string text = scalar(v, "network.latency");
    const size_t dash = text.find('-');
    const std::string_view min_text = trim(std::string_view(text).substr(0, dash));
    const std::string_view max_text =
        dash == std::string::npos ? min_text : trim(std::string_view(text).substr(dash + 1));
    std::string why;
    const auto min = parse_duration_ns(min_text, &why);
    const auto max = min ? parse_duration_ns(max_text, &why) : std::nullopt;
    if (!min || !max) fail(v, "`network.latency` must be a duration or MIN-MAX, like 2ms or 1ms-5ms: " + why);
    if (*max < *min)
      fail(v, "`network.latency`: the minimum " + std::string(min_text) + " is above the maximum " +
                  std::string(max_text));
    n.latency_min_ns = *min;
    n.latency_max_ns = *max;
  }

  void parse_network(const YAML::Node& map, NetworkSpec& n) const {
    static constexpr std::string_view kFields[] = {"latency", "loss", "duplicate"};
    for_each_nested_field(map, "network", kFields, [&](const std::string& field, const YAML::Node& v) {
      if (field == "latency")
        latency(v, n);
      else if (field == "loss")
        n.loss = percent(v, "network.loss");
      else
        n.duplicate = percent(v, "network.duplicate");
    });
  }

  void parse_load(const YAML::Node& map, LoadSpec& l) const {
    static constexpr std::string_view kFields[] = {"rate", "keys", "distribution",  "spread", "cost",
                                                   "kind", "hold", "never_release", "until"};
    for_each_nested_field(map, "load", kFields, [&](const std::string& field, const YAML::Node& v) {
      if (field == "rate") {
        std::string why;
        const auto rate = parse_rate(scalar(v, "load.rate"), &why);
        if (!rate) fail(v, "`load.rate`: " + why);
        l.rate_per_sec = double(rate->tokens) * double(kNanosPerSecond) / double(rate->period_ns);
      } else if (field == "keys") {
        l.keys = whole<size_t>(v, "load.keys", 1, 10'000'000);
      } else if (field == "distribution") {
        l.distribution = choice(v, "load.distribution", {"uniform", "zipf"}) == "zipf"
                             ? LoadSpec::Distribution::kZipf
                             : LoadSpec::Distribution::kUniform;
      } else if (field == "spread") {
        const std::string spread = choice(v, "load.spread", {"uniform", "skewed", "one"});
        l.spread = spread == "one"      ? LoadSpec::Spread::kOne
                   : spread == "skewed" ? LoadSpec::Spread::kSkewed
                                        : LoadSpec::Spread::kUniform;
      } else if (field == "kind") {
        l.kind = choice(v, "load.kind", {"checks", "leases"}) == "leases" ? LoadSpec::Kind::kLeases
                                                                          : LoadSpec::Kind::kChecks;
      } else if (field == "hold") {
        static constexpr std::string_view kHold[] = {"distribution", "mean"};
        for_each_nested_field(v, "load.hold", kHold, [&](const std::string& f, const YAML::Node& h) {
          if (f == "distribution") {
            l.hold = choice(h, "load.hold.distribution", {"exponential", "fixed"}) == "fixed"
                         ? LoadSpec::Hold::kFixed
                         : LoadSpec::Hold::kExponential;
          } else {
            l.hold_mean_ns = positive_duration(h, "load.hold.mean");
          }
        });
      } else if (field == "never_release") {
        l.never_release = percent(v, "load.never_release");
      } else if (field == "until") {
        l.until_ns = positive_duration(v, "load.until");
      } else {
        l.cost = whole<int64_t>(v, "load.cost", 1, kMaxTokens);
      }
    });
  }

  // The `rules:` value, a mapping in the rules file's format, re-serialized so that
  // parse_rules(rules_yaml, ...) reads it. It is parsed here too, so a bad rule is reported now and
  // where it is in the scenario file.
  std::string parse_rules_block(const YAML::Node& root, const YAML::Node& rules) const {
    if (!rules.IsMap()) {
      fail(rules,
           "`rules` must be a mapping in the rules file's format: its own `rules:` list (and optionally "
           "`default:`), indented under the scenario's `rules:`");
    }
    YAML::Emitter out;
    out << rules;
    std::string yaml = std::string(out.c_str()) + "\n";
    try {
      parse_rules(yaml, source_);
    } catch (const ConfigError& reserialized_error) {
      // Its line numbers count in `yaml`. Read in place, the same block fails with the scenario's
      // lines and columns; if cutting it out in place went wrong (YAML we did not foresee), the
      // problem is reported at the `rules:` value instead.
      parse_rules(rules_in_place(root, rules), source_);
      fail(rules, std::string("in `rules`: ") + reserialized_error.what());
    }
    return yaml;
  }

  // The scenario text with everything outside the `rules:` value blanked to spaces, newlines kept:
  // a rules document whose lines and columns are those of the scenario file.
  std::string rules_in_place(const YAML::Node& root, const YAML::Node& rules) const {
    const size_t begin = std::min(size_t(std::max(rules.Mark().pos, 0)), text_.size());
    size_t end = text_.size();
    for (const auto& kv : root) {  // the value runs up to the next top-level key
      const int pos = kv.first.Mark().pos;
      if (pos > int(begin)) end = std::min(end, size_t(pos));
    }
    std::string doc(text_);
    for (size_t i = 0; i < doc.size(); ++i) {
      if ((i < begin || i >= end) && doc[i] != '\n') doc[i] = ' ';
    }
    return doc;
  }

  std::vector<Event> parse_timeline(const YAML::Node& list, size_t initial_nodes) const {
    if (list.IsNull()) return {};
    if (!list.IsSequence())
      fail(list, "`timeline` must be a list of events, like:  - partition 0-3|4-7 at 10s for 20s");
    std::vector<PlacedEvent> events;
    for (const YAML::Node& entry : list) {
      if (!entry.IsScalar()) {
        fail(entry, "a timeline entry is one line of text (quote it if it contains \": \"); expected one of: " +
                        std::string(kGrammar));
      }
      try {
        events.push_back({parse_event_syntax(entry.Scalar()), entry.Mark()});
      } catch (const std::invalid_argument& e) {
        fail(entry, e.what());
      }
    }
    std::stable_sort(events.begin(), events.end(), [](const PlacedEvent& a, const PlacedEvent& b) {
      const Event &x = a.parsed.event, &y = b.parsed.event;
      if (x.at_ns != y.at_ns) return x.at_ns < y.at_ns;
      return x.kind == Event::Kind::kJoin && y.kind != Event::Kind::kJoin;  // joins first at one instant
    });

    // Walk the timeline in time order, tracking what is in force.
    struct InForce {
      const PlacedEvent* event = nullptr;
      bool at(int64_t t) const {
        return event && event->parsed.event.at_ns <= t &&
               (!event->parsed.event.until_ns || t < *event->parsed.event.until_ns);
      }
    };
    InForce partition, loss;
    std::map<size_t, InForce> crashes;  // node -> its latest crash
    size_t nodes = initial_nodes;
    const auto describe = [](const PlacedEvent& p) {
      const Event& e = p.parsed.event;
      return quoted(e.text) + " (line " + std::to_string(p.mark.line + 1) + ", in force from " +
             format_duration(e.at_ns) +
             (e.until_ns ? " to " + format_duration(*e.until_ns) : " to the end of the run") + ")";
    };
    std::vector<Event> out;
    for (PlacedEvent& p : events) {
      Event& e = p.parsed.event;
      const auto fail_here = [&](const std::string& why) { fail(p.mark, quoted(e.text) + ": " + why); };
      switch (e.kind) {
        case Event::Kind::kPartition:
          if (partition.at(e.at_ns))
            fail_here("overlaps the partition " + describe(*partition.event) + "; one partition at a time");
          partition.event = &p;
          break;
        case Event::Kind::kLoss:
          if (loss.at(e.at_ns))
            fail_here("overlaps the loss " + describe(*loss.event) +
                      "; one loss event at a time (end it with \"for\")");
          loss.event = &p;
          break;
        case Event::Kind::kCrash:
          if (crashes[e.node].at(e.at_ns))
            fail_here("node " + std::to_string(e.node) + " is already down: " + describe(*crashes[e.node].event));
          crashes[e.node].event = &p;
          break;
        case Event::Kind::kJoin:
          if (partition.at(e.at_ns))
            fail_here("nodes cannot join during the partition " + describe(*partition.event) +
                      ": which side would they be on?");
          if (e.count > kMaxNodes - nodes) fail_here("more than " + std::to_string(kMaxNodes) + " nodes");
          nodes += e.count;
          break;
      }
      try {
        check_nodes(p.parsed, nodes,
                    nodes == initial_nodes ? "" : " at " + format_duration(e.at_ns) + ", joins included");
      } catch (const std::invalid_argument& error) {
        fail(p.mark, error.what());
      }
      out.push_back(e);
    }
    return out;
  }

  std::string text_;
  const std::string& source_;
};

}  // namespace

Scenario parse_scenario(std::string_view text, const std::string& source) {
  return ScenarioParser(text, source).parse();
}

Scenario load_scenario_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path, 0, 0, "cannot read the scenario file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(path, 0, 0, "cannot read the scenario file");
  return parse_scenario(text.str(), path);
}

}  // namespace tollgate::sim
