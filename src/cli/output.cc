#include "cli/output.h"

#include <algorithm>
#include <cstdint>

#include "json/json.h"

namespace tollgate::cli {

using json::append_json_string;
using json::json_string;

namespace {

std::string describe_limit(const Limit& limit) {
  return "limit " + format_rate(limit.rate) + ", burst " + std::to_string(limit.burst) + ", max debt " +
         std::to_string(limit.max_debt);
}

constexpr int64_t kMaxMillis = INT64_MAX / 1'000'000;  // so that * 10^6 cannot overflow

// Text from the network (node ids, addresses) as it may go to a terminal: unchanged when it is
// plain printable UTF-8, else as a quoted, escaped JSON string, so that no control character
// (an escape sequence) reaches the terminal.
std::string shown(std::string_view text) {
  const std::string quoted = json_string(text);
  bool c1 = false;  // DEL, or a C1 control (U+0080..U+009F, UTF-8 C2 80..C2 9F): JSON lets them through
  for (size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    c1 = c1 || b == 0x7f ||
         (b == 0xc2 && i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xe0) == 0x80);
  }
  if (!c1 && quoted.size() == text.size() + 2 && quoted.compare(1, text.size(), text) == 0 &&
      text.find_first_of("\"\\") == std::string_view::npos) {
    return std::string(text);
  }
  if (!c1) return quoted;
  std::string out;
  static constexpr char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < quoted.size(); ++i) {
    const auto b = static_cast<unsigned char>(quoted[i]);
    if (b == 0x7f) {
      out += "\\u007f";
    } else if (b == 0xc2 && i + 1 < quoted.size() && (static_cast<unsigned char>(quoted[i + 1]) & 0xe0) == 0x80) {
      const auto c = static_cast<unsigned char>(quoted[++i]);
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += quoted[i];
    }
  }
  return out;
}

std::string pad(std::string text, size_t width) {
  if (text.size() < width) text.append(width - text.size(), ' ');
  return text;
}

// Rows as aligned columns, two spaces apart, each line after `indent`.
std::string format_table(const std::vector<std::vector<std::string>>& rows, std::string_view indent = "") {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line(indent);
    for (size_t i = 0; i < row.size(); ++i) line += i + 1 < row.size() ? pad(row[i], widths[i] + 2) : row[i];
    out += line + "\n";
  }
  return out;
}

// "650" when exact, else "650..662".
std::string bounds(uint64_t lower, uint64_t upper) {
  return lower == upper ? std::to_string(upper) : std::to_string(lower) + ".." + std::to_string(upper);
}

void append_metric_text(std::string& out, std::string_view title, std::string_view what, std::string_view column,
                        const MergedTop& m) {
  out += "  " + std::string(title) + ": " + std::to_string(m.total) + " " + std::string(what) + " in all";
  if (m.keys.empty()) {
    out += ", no key\n";
    return;
  }
  out += m.error_bound == 0 ? ", every count exact" : ", each count within " + std::to_string(m.error_bound);
  out += "; a key not listed: at most " + std::to_string(m.unreported_bound) + "\n";
  std::vector<std::vector<std::string>> rows{{"RANK", "KEY", std::string(column)}};
  for (size_t i = 0; i < m.keys.size(); ++i) {
    const MergedKey& key = m.keys[i];
    rows.push_back({std::to_string(i + 1), shown(key.descriptor.empty() ? key.key : key.descriptor),
                    bounds(key.lower, key.upper)});
  }
  out += format_table(rows, "    ");
}

}  // namespace

std::string format_duration_human(int64_t ns) {
  if (ns == kRetryNever) return "never";
  if (ns < 0) {
    // -INT64_MIN overflows; one nanosecond does not matter in output.
    return "-" + format_duration_human(ns == INT64_MIN ? -(ns + 1) : -ns);
  }
  struct Unit {
    int64_t ns;
    const char* suffix;
  };
  static constexpr Unit kUnits[] = {{1'000'000'000, "s"}, {1'000'000, "ms"}, {1'000, "us"}};
  for (const Unit& u : kUnits) {
    if (ns < u.ns) continue;
    std::string out = std::to_string(ns / u.ns);
    // Three decimals of the unit, truncated, trailing zeros dropped.
    const int64_t thousandths = (ns % u.ns) / (u.ns / 1000);
    if (thousandths != 0) {
      std::string decimals = std::to_string(thousandths);
      decimals.insert(0, 3 - decimals.size(), '0');
      while (decimals.back() == '0') decimals.pop_back();
      out += "." + decimals;
    }
    return out + u.suffix;
  }
  return std::to_string(ns) + "ns";
}

std::string format_check_text(std::string_view key, int64_t cost, const CheckReply& reply) {
  std::string out = reply.allowed ? "allowed " : "denied ";
  out += json_string(key) + " cost " + std::to_string(cost) + ": ";
  if (!reply.limited) return out + "not limited (no rule governs the key)\n";
  if (!reply.allowed) {
    out += deny_reason_name(reply.reason);
    out += reply.retry_after_ns == kRetryNever ? ", waiting cannot help"
                                               : ", retry after " + format_duration_human(reply.retry_after_ns);
    out += "; ";
  }
  out += std::to_string(reply.remaining) + (reply.remaining == 1 || reply.remaining == -1 ? " token" : " tokens") +
         " left";
  if (reply.has_limit()) out += "; " + describe_limit(reply.limit);
  return out + "\n";
}

std::string format_check_json(std::string_view key, int64_t cost, const CheckReply& reply) {
  std::string out = "{\"key\": " + json_string(key);
  out += ", \"cost\": " + std::to_string(cost);
  out += std::string(", \"allowed\": ") + (reply.allowed ? "true" : "false");
  out += ", \"remaining\": " + std::to_string(reply.remaining);
  out += ", \"retry_after_ns\": " +
         (reply.retry_after_ns == kRetryNever ? std::string("null") : std::to_string(reply.retry_after_ns));
  out += ", \"reason\": " + json_string(deny_reason_name(reply.reason));
  out += std::string(", \"limited\": ") + (reply.limited ? "true" : "false");
  out += ", \"limit\": ";
  if (reply.has_limit()) {
    const Limit& l = reply.limit;
    out += "{\"rate\": " + json_string(format_rate(l.rate)) + ", \"rate_tokens\": " + std::to_string(l.rate.tokens) +
           ", \"rate_period_ns\": " + std::to_string(l.rate.period_ns) + ", \"burst\": " + std::to_string(l.burst) +
           ", \"max_debt\": " + std::to_string(l.max_debt) + "}";
  } else {
    out += "null";
  }
  return out + "}\n";
}

std::string format_members_text(const std::vector<MemberInfo>& members) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"ID", "ADDRESS", "STATE", "INCARNATION", "LAST-HEARD"});
  for (const MemberInfo& m : members) {
    rows.push_back(
        {shown(m.id) + (m.self ? " (self)" : ""), shown(m.address), member_state_name(m.state),
         std::to_string(m.incarnation),
         m.self ? "-"
                : format_duration_human(std::clamp<int64_t>(m.last_heard_ns / 1'000'000, 0, kMaxMillis) * 1'000'000) +
                      " ago"});
  }
  return format_table(rows);
}

std::string format_stats_text(const StatsList& stats) {
  size_t width = 0;
  for (const auto& [name, value] : stats) width = std::max(width, name.size());
  std::string out;
  for (const auto& [name, value] : stats) out += pad(name, width + 2) + std::to_string(value) + "\n";
  return out;
}

std::string format_top_text(const std::vector<RuleTop>& tops) {
  if (tops.empty()) return "no rule has counted a check in the last --top-window or two\n";
  std::string out;
  for (size_t i = 0; i < tops.size(); ++i) {
    if (i > 0) out += "\n";
    const RuleTop& t = tops[i];
    out += "rule " + shown(t.rule) + ": " + std::to_string(t.members_reporting) + " member" +
           (t.members_reporting == 1 ? "" : "s") + " reporting\n";
    append_metric_text(out, "most denied", "checks denied", "DENIED", t.denied);
    append_metric_text(out, "most tokens", "tokens admitted", "TOKENS", t.tokens);
  }
  return out;
}

}  // namespace tollgate::cli
