#include "json/json.h"

#include <cstdint>

namespace tollgate::json {
namespace {

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Length of the valid UTF-8 sequence starting at text[i], or 0 if the byte there does not start
// one. Follows RFC 3629 (the well-formed byte sequences table): no overlong forms, no surrogates,
// nothing above U+10FFFF.
size_t utf8_sequence_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const size_t left = text.size() - i;
  const unsigned char c = byte(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return left >= 2 && is_continuation(byte(1)) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (left < 3 || !is_continuation(byte(1)) || !is_continuation(byte(2))) return 0;
    if (c == 0xE0 && byte(1) < 0xA0) return 0;  // overlong
    if (c == 0xED && byte(1) > 0x9F) return 0;  // UTF-16 surrogates
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (left < 4 || !is_continuation(byte(1)) || !is_continuation(byte(2)) || !is_continuation(byte(3))) return 0;
    if (c == 0xF0 && byte(1) < 0x90) return 0;  // overlong
    if (c == 0xF4 && byte(1) > 0x8F) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;  // a continuation byte out of place, or 0xC0, 0xC1, 0xF5..0xFF
}

}  // namespace

void append_json_string(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.reserve(out.size() + text.size() + 2);
  out += '"';
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t n = utf8_sequence_length(text, i);
      if (n == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(text.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 0xF];
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
}

std::string json_string(std::string_view text) {
  std::string out;
  append_json_string(out, text);
  return out;
}

std::string format_members_json(const std::vector<MemberInfo>& members) {
  std::string out = "{\"members\": [";
  for (size_t i = 0; i < members.size(); ++i) {
    const MemberInfo& m = members[i];
    if (i > 0) out += ", ";
    out += "{\"id\": " + json_string(m.id) + ", \"address\": " + json_string(m.address) +
           ", \"state\": " + json_string(member_state_name(m.state)) +
           ", \"incarnation\": " + std::to_string(m.incarnation) +
           ", \"last_heard_ms\": " + std::to_string(m.last_heard_ns / 1'000'000) +
           ", \"self\": " + (m.self ? "true" : "false") + "}";
  }
  return out + "]}\n";
}

std::string format_stats_json(const StatsList& stats) {
  std::string out = "{\"stats\": {";
  for (size_t i = 0; i < stats.size(); ++i) {
    if (i > 0) out += ", ";
    out += json_string(stats[i].first) + ": " + std::to_string(stats[i].second);
  }
  return out + "}}\n";
}

namespace {

void append_merged_json(std::string& out, const MergedTop& m) {
  out += "{\"total\": " + std::to_string(m.total) + ", \"error_bound\": " + std::to_string(m.error_bound) +
         ", \"unreported_bound\": " + std::to_string(m.unreported_bound) + ", \"keys\": [";
  for (size_t i = 0; i < m.keys.size(); ++i) {
    if (i > 0) out += ", ";
    out += "{\"key\": ";
    append_json_string(out, m.keys[i].key);
    if (!m.keys[i].descriptor.empty()) {
      out += ", \"descriptor\": ";
      append_json_string(out, m.keys[i].descriptor);
    }
    out += ", \"lower\": " + std::to_string(m.keys[i].lower) + ", \"upper\": " + std::to_string(m.keys[i].upper) + "}";
  }
  out += "]}";
}

}  // namespace

std::string format_top_json(const std::vector<RuleTop>& tops) {
  std::string out = "{\"rules\": [";
  for (size_t i = 0; i < tops.size(); ++i) {
    if (i > 0) out += ", ";
    out += "{\"rule\": ";
    append_json_string(out, tops[i].rule);
    out += ", \"members_reporting\": " + std::to_string(tops[i].members_reporting) + ", \"denied\": ";
    append_merged_json(out, tops[i].denied);
    out += ", \"tokens\": ";
    append_merged_json(out, tops[i].tokens);
    out += "}";
  }
  out += "]}\n";
  return out;
}

}  // namespace tollgate::json
