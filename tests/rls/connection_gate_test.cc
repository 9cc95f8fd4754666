// The rate limit service's connection caps (rls/connection_gate.h): the policy against fake
// sockets here; on real sockets through a real RlsServer in rls_server_test.cc.
#include "rls/connection_gate.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

namespace tollgate::rls {
namespace {

// Connections by fd, with the activity a test gives them.
class FakeSockets : public ConnectionGate::Sockets {
 public:
  bool held_by_grpc(const ConnectionGate::Held& c) override { return !closed_by_grpc.contains(c.fd); }
  Activity activity(const ConnectionGate::Held& c) override { return activity_of[c.fd]; }
  void end(const ConnectionGate::Held& c) override { ended.insert(c.fd); }
  void release(const ConnectionGate::Held& c) override { released.insert(c.fd); }

  std::map<int, Activity> activity_of;
  std::set<int> closed_by_grpc, ended, released;
};

ConnectionGate::Held conn(int fd, const std::string& client) { return {fd, fd + 1000, uint64_t(fd), client}; }

TEST(ConnectionGate, AtAClientsCapItsConnectionWithoutCallsGoesFirstThenTheLeastRecentlyActive) {
  FakeSockets sockets;
  ConnectionGate gate({.max_connections = 100, .max_per_client = 3}, sockets);
  sockets.activity_of[1] = {.idle_ms = 5, .bytes_received = 50'000};  // Envoy's, carrying calls
  sockets.activity_of[2] = {.idle_ms = 900, .bytes_received = 80'000};
  sockets.activity_of[3] = {.idle_ms = 1, .bytes_received = 0};  // half-open, just opened
  for (int fd : {1, 2, 3}) gate.admit(conn(fd, "10.0.0.1"));
  EXPECT_TRUE(sockets.ended.empty());

  gate.admit(conn(4, "10.0.0.1"));
  EXPECT_EQ(sockets.ended, std::set<int>{3}) << "the one without calls, though the most recently active";
  EXPECT_TRUE(sockets.released.contains(3));
  sockets.activity_of[4] = {.idle_ms = 0, .bytes_received = 5'000};
  gate.admit(conn(5, "10.0.0.1"));
  EXPECT_EQ(sockets.ended, (std::set<int>{2, 3})) << "then the one idle longest";
  EXPECT_EQ(gate.held_by("10.0.0.1"), 3u);
  EXPECT_EQ(gate.evicted(), 2);
}

TEST(ConnectionGate, AtTheTotalCapTheClientHoldingMostMakesRoomNotAnother) {
  FakeSockets sockets;
  ConnectionGate gate({.max_connections = 4, .max_per_client = 4}, sockets);
  gate.admit(conn(1, "envoy"));
  sockets.activity_of[1] = {.idle_ms = 60'000, .bytes_received = 0};  // idle a minute, no calls
  for (int fd : {2, 3, 4}) gate.admit(conn(fd, "attacker"));
  gate.admit(conn(5, "newcomer"));
  ASSERT_EQ(sockets.ended.size(), 1u);
  EXPECT_FALSE(sockets.ended.contains(1)) << "the client holding most goes, however idle the other";
  EXPECT_EQ(gate.held_by("attacker"), 2u);
  EXPECT_EQ(gate.held_by("envoy"), 1u);
  EXPECT_EQ(gate.open(), 4u);
}

TEST(ConnectionGate, WhatGrpcClosedNoLongerCountsAndItsDuplicateIsReleased) {
  FakeSockets sockets;
  ConnectionGate gate({.max_connections = 100, .max_per_client = 2}, sockets);
  gate.admit(conn(1, "a"));
  gate.admit(conn(2, "a"));
  gate.admit(conn(3, "b"));
  sockets.closed_by_grpc = {1, 3};
  gate.admit(conn(4, "a"));  // a's closed one is forgotten first: no eviction
  EXPECT_TRUE(sockets.ended.empty());
  EXPECT_EQ(sockets.released, std::set<int>{1});
  EXPECT_EQ(gate.open(), 3u) << "b's is forgotten by a sweep, not by a's admission";
  gate.sweep();
  EXPECT_EQ(sockets.released, (std::set<int>{1, 3}));
  EXPECT_EQ(gate.open(), 2u);
  EXPECT_EQ(gate.held_by("b"), 0u);
}

TEST(ConnectionGate, ItsDestructionReleasesEveryDuplicate) {
  FakeSockets sockets;
  {
    ConnectionGate gate({}, sockets);
    gate.admit(conn(1, "a"));
    gate.admit(conn(2, "b"));
  }
  EXPECT_EQ(sockets.released, (std::set<int>{1, 2}));
  EXPECT_TRUE(sockets.ended.empty());
}

}  // namespace
}  // namespace tollgate::rls
