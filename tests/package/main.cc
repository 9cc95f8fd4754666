// Links the installed library and uses it: exits 0 only if a rule parsed from YAML throttles.
#include <cstdio>

#include "tollgate/key_table.h"
#include "tollgate/rules_file.h"

int main() {
  tollgate::KeyTable table(tollgate::parse_rules("rules:\n  - {match: \"k\", rate: 1/s, burst: 2}\n", "inline"));
  const bool first = table.allow("k", 2, 0).allowed;
  const bool second = table.allow("k", 1, 0).allowed;
  std::printf("consumer: first %s, second %s\n", first ? "allowed" : "denied", second ? "allowed" : "denied");
  return first && !second ? 0 : 1;
}
