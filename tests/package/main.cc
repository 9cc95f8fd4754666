// Links the installed libraries and uses them: exits 0 only if a rule parsed from YAML throttles
// and the client library fails open without a daemon.
#include <cstdio>

#include "tollgate/client.h"
#include "tollgate/key_table.h"
#include "tollgate/rules_file.h"

int main() {
  tollgate::KeyTable table(tollgate::parse_rules("rules:\n  - {match: \"k\", rate: 1/s, burst: 2}\n", "inline"));
  const bool first = table.allow("k", 2, 0).allowed;
  const bool second = table.allow("k", 1, 0).allowed;
  std::printf("consumer: first %s, second %s\n", first ? "allowed" : "denied", second ? "allowed" : "denied");
  // The client library links too; with no daemon it fails open, at once.
  tollgate::ClientOptions options;
  options.endpoint = "unix:/nonexistent/tollgated.sock";
  tollgate::Client client(options);
  const tollgate::CheckReply reply = client.check("k");
  std::printf("consumer: client without a daemon: %s (%s)\n", reply.allowed ? "allowed" : "denied",
              tollgate::reply_source_name(reply.source));
  return first && !second && reply.allowed && !reply.from_daemon() ? 0 : 1;
}
