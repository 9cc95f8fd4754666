#include "scenario.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "tollgate/config_error.h"
#include "tollgate/duration.h"
#include "tollgate/limit.h"

namespace tollgate::sim {
namespace {

std::vector<std::string> words(std::string_view line) {
  std::istringstream in{std::string(line)};
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

int64_t duration_or_throw(const std::string& text) {
  std::string why;
  auto ns = parse_duration_ns(text, &why);
  if (!ns) throw std::invalid_argument(why);
  return *ns;
}

size_t index_or_throw(const std::string& text) {
  size_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw std::invalid_argument("expected a node index, got \"" + text + "\"");
  }
  return v;
}

// "20%" -> 0.2
double percent_or_throw(const std::string& text) {
  if (text.size() < 2 || text.back() != '%') throw std::invalid_argument("expected a percentage like 20%, got \"" + text + "\"");
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size() - 1, v);
  if (ec != std::errc() || end != text.data() + text.size() - 1 || v < 0 || v > 100) {
    throw std::invalid_argument("expected a percentage from 0% to 100%, got \"" + text + "\"");
  }
  return v / 100;
}

// "0-3,5" -> {0,1,2,3,5}
std::vector<size_t> group_or_throw(const std::string& text) {
  std::vector<size_t> out;
  std::istringstream in(text);
  for (std::string part; std::getline(in, part, ',');) {
    const size_t dash = part.find('-');
    if (dash == std::string::npos) {
      out.push_back(index_or_throw(part));
      continue;
    }
    const size_t a = index_or_throw(part.substr(0, dash)), b = index_or_throw(part.substr(dash + 1));
    if (b < a) throw std::invalid_argument("range \"" + part + "\" runs backwards");
    for (size_t i = a; i <= b; ++i) out.push_back(i);
  }
  if (out.empty()) throw std::invalid_argument("empty group in \"" + text + "\"");
  return out;
}

}  // namespace

Event parse_event(std::string_view line, size_t nodes) {
  const std::vector<std::string> w = words(line);
  Event e;
  e.text = std::string(line);
  auto expect = [&](size_t i, const char* word) {
    if (i >= w.size() || w[i] != word) {
      throw std::invalid_argument("\"" + e.text + "\": expected \"" + word + "\" at word " + std::to_string(i + 1));
    }
  };
  auto check_node = [&](size_t i) {
    if (i >= nodes) throw std::invalid_argument("\"" + e.text + "\": node " + std::to_string(i) + " does not exist (" + std::to_string(nodes) + " nodes)");
  };
  if (w.empty()) throw std::invalid_argument("empty timeline entry");
  if (w[0] == "partition" && w.size() >= 4) {
    e.kind = Event::Kind::kPartition;
    std::istringstream groups(w[1]);
    std::set<size_t> seen;
    for (std::string g; std::getline(groups, g, '|');) {
      e.groups.push_back(group_or_throw(g));
      for (size_t i : e.groups.back()) {
        check_node(i);
        if (!seen.insert(i).second) throw std::invalid_argument("\"" + e.text + "\": node " + std::to_string(i) + " is in two groups");
      }
    }
    if (e.groups.size() < 2) throw std::invalid_argument("\"" + e.text + "\": a partition needs at least two groups: 0-3|4-7");
    if (seen.size() != nodes) throw std::invalid_argument("\"" + e.text + "\": every node 0-" + std::to_string(nodes - 1) + " must be in a group");
    expect(2, "at");
    e.at_ns = duration_or_throw(w[3]);
    if (w.size() > 4) {
      expect(4, "for");
      if (w.size() != 6) throw std::invalid_argument("\"" + e.text + "\": expected \"for DURATION\" at the end");
      e.until_ns = e.at_ns + duration_or_throw(w[5]);
    }
  } else if (w[0] == "loss" && w.size() >= 4) {
    e.kind = Event::Kind::kLoss;
    e.loss = percent_or_throw(w[1]);
    expect(2, "from");
    e.at_ns = duration_or_throw(w[3]);
    if (w.size() > 4) {
      expect(4, "for");
      if (w.size() != 6) throw std::invalid_argument("\"" + e.text + "\": expected \"for DURATION\" at the end");
      e.until_ns = e.at_ns + duration_or_throw(w[5]);
    }
  } else if (w[0] == "crash" && w.size() >= 5) {
    e.kind = Event::Kind::kCrash;
    expect(1, "node");
    e.node = index_or_throw(w[2]);
    check_node(e.node);
    expect(3, "at");
    std::string at = w[4];
    const bool restart = !at.empty() && at.back() == ',';
    if (restart) at.pop_back();
    e.at_ns = duration_or_throw(at);
    if (restart || w.size() > 5) {
      expect(5, "restart");
      expect(6, "at");
      if (w.size() != 8) throw std::invalid_argument("\"" + e.text + "\": expected \", restart at TIME\" at the end");
      e.until_ns = duration_or_throw(w[7]);
      if (*e.until_ns <= e.at_ns) throw std::invalid_argument("\"" + e.text + "\": the restart must come after the crash");
    }
  } else if (w[0] == "join" && w.size() == 5) {
    e.kind = Event::Kind::kJoin;
    e.count = index_or_throw(w[1]);
    if (e.count == 0) throw std::invalid_argument("\"" + e.text + "\": join at least 1 node");
    expect(2, "nodes");
    expect(3, "at");
    e.at_ns = duration_or_throw(w[4]);
  } else {
    throw std::invalid_argument("\"" + e.text + "\": expected one of: partition G|G at T [for D]; loss P% from T [for D]; "
                                "crash node I at T[, restart at T]; join K nodes at T");
  }
  return e;
}

std::vector<Phase> Scenario::phases() const {
  // Boundaries: every event start and end, each naming the phase that begins there.
  struct Mark {
    int64_t at;
    std::string name;
  };
  std::vector<Mark> marks;
  for (const Event& e : timeline) {
    static const char* const kStart[] = {"partition", "loss", "crashed", "joined"};
    static const char* const kEnd[] = {"healed", "loss-over", "restarted", ""};
    marks.push_back({e.at_ns, kStart[int(e.kind)]});
    if (e.until_ns) marks.push_back({*e.until_ns, kEnd[int(e.kind)]});
  }
  std::stable_sort(marks.begin(), marks.end(), [](const Mark& a, const Mark& b) { return a.at < b.at; });
  std::vector<Phase> out;
  std::map<std::string, int> used;
  auto add = [&](std::string phase, int64_t from, int64_t to) {
    from = std::max<int64_t>(from, 0);
    to = std::min(to, duration_ns);
    if (to <= from) return;
    const int n = ++used[phase];
    if (n > 1) phase += "-" + std::to_string(n);
    out.push_back({phase, from, to});
  };
  std::string phase = "steady";
  int64_t start = 0;
  for (const Mark& m : marks) {
    if (m.at >= duration_ns) break;
    if (m.at > start) {
      add(phase, start, m.at);
      start = m.at;
    }
    phase = m.name;
  }
  add(phase, start, duration_ns);
  return out;
}

namespace {

class ScenarioParser {
 public:
  explicit ScenarioParser(const std::string& source) : source_(source) {}

  Scenario parse(std::string_view text) {
    YAML::Node root;
    try {
      root = YAML::Load(std::string(text));
    } catch (const YAML::ParserException& e) {
      throw ConfigError(source_, e.mark.line + 1, e.mark.column + 1, e.msg);
    }
    if (!root.IsMap()) fail(root, "a scenario is a mapping: name, nodes, mode, rules, load, timeline, ...");
    Scenario s;
    std::vector<std::pair<std::string, YAML::Node>> timeline;
    for (const auto& kv : fields(root, {"name", "nodes", "mode", "transport", "membership", "policy", "interval", "fanout",
                                        "duration", "seed", "network", "rules", "load", "timeline"})) {
      const std::string& k = kv.first;
      const YAML::Node& v = kv.second;
      if (k == "name") s.name = scalar(v);
      else if (k == "nodes") s.nodes = size_t(integer(v, 1, 100'000));
      else if (k == "mode") s.mode = choice(v, {"mesh", "gossip"}) == "mesh" ? DisseminationMode::kMesh : DisseminationMode::kGossip;
      else if (k == "transport") s.transport = choice(v, {"udp", "tcp"});
      else if (k == "membership") s.membership = choice(v, {"static", "heartbeat"}) == "static" ? MembershipKind::kStatic : MembershipKind::kHeartbeat;
      else if (k == "policy") s.policy = choice(v, {"open", "proportional"}) == "open" ? PartitionPolicy::kOpen : PartitionPolicy::kProportional;
      else if (k == "interval") s.interval_ns = duration(v, true);
      else if (k == "fanout") s.fanout = size_t(integer(v, 1, 64));
      else if (k == "duration") s.duration_ns = duration(v, true);
      else if (k == "seed") s.seed = uint64_t(integer(v, 0, INT64_MAX));
      else if (k == "network") network(v, s.network);
      else if (k == "rules") {
        if (!v.IsMap()) fail(v, "rules: a mapping in the rules file's format (rules: [...], default: ...)");
        YAML::Emitter out;
        out << v;
        s.rules_yaml = std::string(out.c_str()) + "\n";
      } else if (k == "load") load(v, s.load);
      else if (k == "timeline") {
        if (!v.IsSequence()) fail(v, "timeline: a list of events, e.g. - partition 0-3|4-7 at 10s for 20s");
        for (const auto& e : v) timeline.emplace_back(scalar(e), e);
      }
    }
    if (s.rules_yaml.empty()) fail(root, "missing `rules:`");
    size_t nodes = s.nodes;
    for (const auto& [line, node] : timeline) {
      try {
        s.timeline.push_back(parse_event(line, nodes));
      } catch (const std::invalid_argument& e) {
        fail(node, e.what());
      }
      if (s.timeline.back().kind == Event::Kind::kJoin) nodes += s.timeline.back().count;
    }
    std::stable_sort(s.timeline.begin(), s.timeline.end(), [](const Event& a, const Event& b) { return a.at_ns < b.at_ns; });
    return s;
  }

 private:
  [[noreturn]] void fail(const YAML::Node& at, const std::string& why) const {
    const YAML::Mark m = at.Mark();
    throw ConfigError(source_, m.is_null() ? 0 : m.line + 1, m.is_null() ? 0 : m.column + 1, why);
  }
  std::vector<std::pair<std::string, YAML::Node>> fields(const YAML::Node& map, std::initializer_list<const char*> allowed) const {
    if (!map.IsMap()) fail(map, "expected a mapping");
    std::vector<std::pair<std::string, YAML::Node>> out;
    std::set<std::string> seen;
    for (const auto& kv : map) {
      const std::string k = kv.first.Scalar();
      if (std::find_if(allowed.begin(), allowed.end(), [&](const char* a) { return k == a; }) == allowed.end()) {
        std::string list;
        for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
        fail(kv.first, "unknown field \"" + k + "\" (expected one of: " + list + ")");
      }
      if (!seen.insert(k).second) fail(kv.first, "field \"" + k + "\" appears twice");
      out.emplace_back(k, kv.second);
    }
    return out;
  }
  std::string scalar(const YAML::Node& v) const {
    if (!v.IsScalar()) fail(v, "expected a single value");
    return v.Scalar();
  }
  int64_t integer(const YAML::Node& v, int64_t min, int64_t max) const {
    const std::string t = scalar(v);
    int64_t n = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), n);
    if (ec != std::errc() || end != t.data() + t.size() || n < min || n > max) {
      fail(v, "expected a whole number from " + std::to_string(min) + " to " + std::to_string(max) + ", got \"" + t + "\"");
    }
    return n;
  }
  std::string choice(const YAML::Node& v, std::initializer_list<const char*> options) const {
    const std::string t = scalar(v);
    std::string list;
    for (const char* o : options) {
      if (t == o) return t;
      list += (list.empty() ? "" : " or ") + std::string(o);
    }
    fail(v, "expected " + list + ", got \"" + t + "\"");
  }
  int64_t duration(const YAML::Node& v, bool positive) const {
    std::string why;
    auto ns = parse_duration_ns(scalar(v), &why);
    if (!ns) fail(v, why);
    if (positive && *ns <= 0) fail(v, "must be longer than 0");
    return *ns;
  }
  double percent(const YAML::Node& v) const {
    try {
      return percent_or_throw(scalar(v));
    } catch (const std::invalid_argument& e) {
      fail(v, e.what());
    }
  }
  void network(const YAML::Node& map, NetworkSpec& n) const {
    for (const auto& [k, v] : fields(map, {"latency", "loss", "duplicate"})) {
      if (k == "latency") {
        const std::string t = scalar(v);
        const size_t dash = t.find('-');
        std::string why;
        auto lo = parse_duration_ns(t.substr(0, dash), &why);
        auto hi = dash == std::string::npos ? lo : parse_duration_ns(t.substr(dash + 1), &why);
        if (!lo || !hi || *hi < *lo) fail(v, "latency: expected DURATION or MIN-MAX, e.g. 1ms-5ms" + (why.empty() ? "" : " (" + why + ")"));
        n.latency_min_ns = *lo;
        n.latency_max_ns = *hi;
      } else if (k == "loss") {
        n.loss = percent(v);
      } else {
        n.duplicate = percent(v);
      }
    }
  }
  void load(const YAML::Node& map, LoadSpec& l) const {
    for (const auto& [k, v] : fields(map, {"rate", "keys", "distribution", "spread", "cost"})) {
      if (k == "rate") {
        std::string why;
        auto r = parse_rate(scalar(v), &why);
        if (!r) fail(v, why);
        l.rate_per_sec = double(r->tokens) * double(kNanosPerSecond) / double(r->period_ns);
      } else if (k == "keys") {
        l.keys = size_t(integer(v, 1, 10'000'000));
      } else if (k == "distribution") {
        l.distribution = choice(v, {"uniform", "zipf"}) == "zipf" ? LoadSpec::Distribution::kZipf : LoadSpec::Distribution::kUniform;
      } else if (k == "spread") {
        const std::string sp = choice(v, {"uniform", "skewed", "one"});
        l.spread = sp == "one" ? LoadSpec::Spread::kOne : sp == "skewed" ? LoadSpec::Spread::kSkewed : LoadSpec::Spread::kUniform;
      } else {
        l.cost = integer(v, 1, kMaxTokens);
      }
    }
  }

  const std::string& source_;
};

}  // namespace

Scenario parse_scenario(std::string_view text, const std::string& source) { return ScenarioParser(source).parse(text); }

Scenario load_scenario_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path, 0, 0, "cannot read scenario file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_scenario(text.str(), path);
}

}  // namespace tollgate::sim
