#include "config/peers_file.h"

#include <gtest/gtest.h>

#include "tollgate/config_error.h"

namespace tollgate {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_peers(text, "peers.txt");
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return "";
}

TEST(PeersFile, ParsesIdsAndAddressesSkippingCommentsAndBlankLines) {
  const auto peers = parse_peers(
      "# the cluster\nnode-a 10.0.1.5:7946\n\n  node-b\t10.0.1.6:7946   # rack 2\nv6 [::1]:7000\n", "peers.txt");
  ASSERT_EQ(peers.size(), 3u);
  EXPECT_EQ(peers[0], (PeerSpec{"node-a", "10.0.1.5:7946"}));
  EXPECT_EQ(peers[1], (PeerSpec{"node-b", "10.0.1.6:7946"}));
  EXPECT_EQ(peers[2], (PeerSpec{"v6", "[::1]:7000"}));
  EXPECT_TRUE(parse_peers("", "peers.txt").empty());
}

TEST(PeersFile, ErrorsNameFileLineAndProblem) {
  EXPECT_EQ(error_of("a 1.2.3.4:1\nb\n"), "peers.txt:2: peer \"b\" has no address (expected: id host:port)");
  EXPECT_EQ(error_of("a 1.2.3.4:1 extra\n"),
            "peers.txt:1: unexpected \"extra\" after the address (expected: id host:port)");
  EXPECT_EQ(error_of("a 1.2.3.4\n"), "peers.txt:1: address \"1.2.3.4\": expected host:port");
  EXPECT_EQ(error_of("a 1.2.3.4:0\n"), "peers.txt:1: address \"1.2.3.4:0\": port must be a number from 1 to 65535");
  EXPECT_EQ(error_of("a 1.2.3.4:70000\n"),
            "peers.txt:1: address \"1.2.3.4:70000\": port must be a number from 1 to 65535");
  EXPECT_EQ(error_of("a :80\n"), "peers.txt:1: address \":80\": missing host");
  EXPECT_EQ(error_of("a h:1\n# c\na h:2\n"), "peers.txt:3: peer id \"a\" already listed at line 1");
  EXPECT_EQ(error_of("a h:1\nb h:1\n"), "peers.txt:2: address h:1 already listed at line 1");
}

TEST(PeersFile, MissingFileIsAnErrorNamingIt) {
  try {
    load_peers_file("/nonexistent/peers.txt");
    FAIL() << "loaded a missing file";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.file(), "/nonexistent/peers.txt");
    EXPECT_NE(std::string(e.what()).find("cannot read peers file"), std::string::npos);
  }
}

}  // namespace
}  // namespace tollgate
