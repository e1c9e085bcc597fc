// N ranks of the ring all-reduce inside one test process, each running its operations on its own
// thread, over one of four links:
//   "tcp"       gRPC, each rank with its own server on 127.0.0.1:0;
//   "unix"      gRPC over abstract Unix sockets, as the local launcher's workers use;
//   "plain-tcp" TcpRingLink: segments on plain TCP, found through each rank's gRPC server;
//   "memory"    InMemoryRing, which can also inject faults (TestRing::memory).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <absl/status/status.h>
#include <absl/strings/str_cat.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "services/collective/in_memory_ring_link.h"
#include "services/collective/ring_allreduce.h"
#include "services/collective/tcp_ring_link.h"
#include "services/common/wire/rpc.h"

namespace strata::ring_test {

// Makes ring_allreduce_tests run as rank 1 of a two-rank ring over tcp instead of running tests:
// `ring_allreduce_tests --ring-peer DIR FLOATS` (ring_test_main.cc). The peer meets rank 0 through
// DIR, then runs 3 operations of FLOATS floats, a 1-float one, then FLOATS-float ones until one
// fails; the test that kills a real peer process starts it.
inline constexpr char kRingPeerFlag[] = "--ring-peer";

struct TestRank {
  std::unique_ptr<RingAllReduce> ring;
  TcpRingLink* tcp = nullptr;            // ring's link, for "plain-tcp"
  std::unique_ptr<grpc::Server> server;  // declared after ring: shut down before it
  std::string address;
};

struct TestRing {
  std::string link;
  std::unique_ptr<InMemoryRing> memory;  // set for "memory"
  std::vector<TestRank> ranks;

  // How the ring's errors name rank r.
  std::string Name(int r) const { return absl::StrCat("rank ", r, " (", ranks[r].address, ")"); }

  // The rank's process is gone. Over gRPC, only before any operation has started (shutting a
  // server down waits for its open streams). Over plain TCP its link goes too (its connections
  // close, as a dead process's would).
  void Kill(int r) {
    if (memory) {
      memory->Kill(r);
      return;
    }
    ranks[r].server->Shutdown();
    if (link == "plain-tcp") {
      ranks[r].ring.reset();
      ranks[r].tcp = nullptr;
    }
  }
};

// Starts rank r of `ring` (again, for a replacement): over gRPC with its own server, on the
// abstract socket `unix_address` for "unix".
inline void StartRank(TestRing& ring, int r, const std::string& unix_address) {
  TestRank& rank = ring.ranks[r];
  if (ring.memory) {
    rank.ring = std::make_unique<RingAllReduce>(
        r, rank.ring ? ring.memory->Replace(r) : ring.memory->Link(r));
    rank.address = absl::StrCat("in-memory-", r);
    return;
  }
  if (ring.link == "plain-tcp") {
    auto tcp = TcpRingLink::Create(TcpRingLinkOptions{});
    EXPECT_TRUE(tcp.ok()) << tcp.status();
    rank.tcp = tcp->get();
    rank.ring = std::make_unique<RingAllReduce>(r, std::move(*tcp));
  } else {
    rank.ring = std::make_unique<RingAllReduce>(r);
  }
  int port = 0;
  std::vector<std::string> also_listen;
  if (ring.link == "unix") also_listen.push_back(unix_address);
  rank.server = StartServer("127.0.0.1:0", {rank.ring->service()}, &port, also_listen);
  EXPECT_NE(rank.server, nullptr);
  EXPECT_GT(port, 0);
  rank.address = ring.link == "unix" ? unix_address : absl::StrCat("127.0.0.1:", port);
}

inline std::vector<std::string> Peers(const TestRing& ring) {
  std::vector<std::string> peers;
  for (const TestRank& rank : ring.ranks) peers.push_back(rank.address);
  return peers;
}

inline TestRing StartRing(int world, const std::string& link) {
  static int rings = 0;  // abstract socket names are machine-wide: keep them unique
  ++rings;
  TestRing out;
  out.link = link;
  if (link == "memory") out.memory = std::make_unique<InMemoryRing>(world);
  out.ranks.resize(world);
  for (int r = 0; r < world; ++r) {
    StartRank(out, r,
              absl::StrCat("unix-abstract:strata-ring-test-", getpid(), "-", rings, "-", r));
  }
  const std::vector<std::string> peers = Peers(out);
  for (auto& rank : out.ranks) EXPECT_TRUE(rank.ring->Connect(peers).ok());
  return out;
}

// A new process in the place of rank r, killed before (TestRing::Kill): in-memory, a fresh link;
// over gRPC, a new ring and server (on the same abstract socket for "unix", a new port for "tcp").
// It is not connected: the ring re-forms with RingAllReduce::Reform.
inline void ReplaceRank(TestRing& ring, int r) {
  TestRank& rank = ring.ranks[r];
  rank.server.reset();  // shut down by Kill, if not yet by the destructor
  if (!ring.memory) rank.ring.reset();
  StartRank(ring, r, rank.address);
}

// Runs fn(rank) on one thread per rank; fails the test instead of hanging if any thread does not
// return within a generous bound.
inline std::vector<absl::Status> RunOnAll(int world, const std::function<absl::Status(int)>& fn) {
  std::vector<std::future<absl::Status>> futures;
  for (int r = 0; r < world; ++r) futures.push_back(std::async(std::launch::async, fn, r));
  std::vector<absl::Status> out;
  for (auto& f : futures) {
    if (f.wait_for(std::chrono::seconds(120)) != std::future_status::ready) {
      ADD_FAILURE() << "an all-reduce did not return: hang";
      std::abort();  // a hung thread cannot be joined; do not let the suite wait forever
    }
    out.push_back(f.get());
  }
  return out;
}

// Integers small enough that every partial sum is exact in float.
inline float Value(int rank, size_t i, int op) {
  return static_cast<float>(static_cast<int>((i * 7 + rank * 13 + op * 5) % 201) - 100);
}

}  // namespace strata::ring_test
