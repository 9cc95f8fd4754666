// Text from outside into a log line (src/util/printable.h).
#include "util/printable.h"

#include <gtest/gtest.h>

namespace tollgate {
namespace {

TEST(Printable, ControlBytesAreEscapedAndUtf8PassesUnchanged) {
  EXPECT_EQ(printable("rules.yaml:2:5: unknown field \"burts\""), "rules.yaml:2:5: unknown field \"burts\"");
  EXPECT_EQ(printable("a\x1b[31mred\nforged line\r\x7f"), "a\\x1b[31mred\\x0aforged line\\x0d\\x7f");
  EXPECT_EQ(printable("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac");  // é, €: UTF-8 unchanged
  EXPECT_EQ(printable("c1 \xc2\x9b"
                      "31m"),
            "c1 \\xc2\\x9b31m");  // U+009B, the 8-bit CSI
  EXPECT_EQ(printable(std::string_view("nul\0x", 5)), "nul\\x00x");
}

}  // namespace
}  // namespace tollgate
