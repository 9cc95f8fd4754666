// Text from outside (a rules service's answer, a field name in a fetched rules document, a
// server's reason phrase) as it may go into a log line: control bytes (C0, DEL, and C1 as UTF-8
// C2 80..9F) written as \xNN, so that no escape sequence or forged line reaches a terminal or a
// log reader. Everything else, UTF-8 included, passes unchanged.
#ifndef TOLLGATE_SRC_UTIL_PRINTABLE_H_
#define TOLLGATE_SRC_UTIL_PRINTABLE_H_

#include <string>
#include <string_view>

namespace tollgate {

inline std::string printable(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  auto escape = [&](unsigned char b) {
    out += "\\x";
    out += kHex[b >> 4];
    out += kHex[b & 15];
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    const bool c1 = b == 0xc2 && i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xe0) == 0x80;
    if (b < 0x20 || b == 0x7f) {
      escape(b);
    } else if (c1) {
      escape(b);
      escape(static_cast<unsigned char>(text[++i]));
    } else {
      out += char(b);
    }
  }
  return out;
}

}  // namespace tollgate

#endif  // TOLLGATE_SRC_UTIL_PRINTABLE_H_
