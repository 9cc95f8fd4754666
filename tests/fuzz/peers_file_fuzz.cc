// The peers file of static membership (src/config/peers_file.h): any text into
// parse_peers(), as the daemon loads it at start-up and whenever the file changes.
//
// Contract: it returns peers or throws ConfigError naming the source and a line of the text,
// never anything else. What it accepts has non-empty ids and addresses without blanks or '#',
// no id or address twice, and every address splits into a host and a port in 1..65535. The
// peers written back as `id address` lines parse to the same list.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "config/peers_file.h"
#include "fuzz_util.h"
#include "tollgate/config_error.h"
#include "util/host_port.h"

namespace {

const std::string kSource = "fuzz-peers.txt";

std::optional<std::vector<tollgate::PeerSpec>> parse(std::string_view text) {
  try {
    return tollgate::parse_peers(text, kSource);
  } catch (const tollgate::ConfigError& e) {
    FUZZ_CHECK(std::string_view(e.what()).starts_with(kSource), "a ConfigError that does not name the file");
    const size_t lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
    FUZZ_CHECK(e.line() >= 1 && static_cast<size_t>(e.line()) <= lines, "a ConfigError naming no line of the file");
    return std::nullopt;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parse_peers threw something other than ConfigError: %s\n", e.what());
    FUZZ_CHECK(false, "parse_peers throws only ConfigError");
  }
  return std::nullopt;
}

bool has_blank_or_hash(const std::string& s) { return s.find_first_of(" \t\n\v\f\r#") != std::string::npos; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto peers = parse(tollgate::fuzz::as_text(data, size));
  if (!peers) return 0;

  std::set<std::string> ids, addresses;
  std::string text;
  for (const tollgate::PeerSpec& p : *peers) {
    FUZZ_CHECK(!p.id.empty() && !has_blank_or_hash(p.id), "an id that is empty or holds a blank or '#'");
    FUZZ_CHECK(!p.address.empty() && !has_blank_or_hash(p.address), "an address that is empty or holds a blank or '#'");
    FUZZ_CHECK(ids.insert(p.id).second, "an id listed twice");
    FUZZ_CHECK(addresses.insert(p.address).second, "an address listed twice");
    std::string host;
    uint16_t port = 0;
    FUZZ_CHECK(tollgate::split_host_port(p.address, &host, &port, nullptr), "an address that does not split");
    FUZZ_CHECK(!host.empty() && port >= 1, "an address without a host or with port 0");
    text += p.id + " " + p.address + "\n";
  }
  const auto again = parse(text);
  FUZZ_CHECK(again.has_value() && again->size() == peers->size(), "the peers written back do not parse");
  for (size_t i = 0; i < peers->size(); ++i) {
    FUZZ_CHECK((*again)[i].id == (*peers)[i].id && (*again)[i].address == (*peers)[i].address,
               "a peer written back differs");
  }
  return 0;
}
