// main() of ring_allreduce_tests. With kRingPeerFlag (ring_test_support.h) the binary is instead
// rank 1 of a two-rank ring over loopback TCP (the gRPC link, or the plain TCP link with a fourth
// argument "plain-tcp"): the peer process that AKilledPeerProcessIsNamed kills. The test needs no
// other binary, so it is built and run wherever the ring's tests are.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bench/allreduce/rank_launcher.h"
#include "services/collective/ring_allreduce.h"
#include "tests/unit/collective/ring_test_support.h"

namespace {

int RunPeerRank(const std::string& dir, size_t floats, const std::string& link) {
  strata::bench::DieWithParent();
  auto made = strata::bench::MakeRing(1, link);
  if (!made.ok()) {
    std::fprintf(stderr, "ring peer: %s\n", made.status().ToString().c_str());
    std::_Exit(1);
  }
  strata::RingAllReduce& ring = **made;
  std::unique_ptr<grpc::Server> server;
  absl::Status status = strata::bench::JoinRing(&ring, link, dir, /*rank=*/1, /*world=*/2,
                                                std::chrono::seconds(60), &server);
  strata::AllReduceOptions options;
  options.deadline = std::chrono::seconds(60);
  std::vector<float> data(floats, 1.0f);
  float token = 0;
  for (int i = 0; i < 3 && status.ok(); ++i)
    status = ring.AllReduceAverage(data.data(), floats, options);
  if (status.ok()) status = ring.AllReduceAverage(&token, 1, options);
  while (status.ok()) status = ring.AllReduceAverage(data.data(), floats, options);
  std::fprintf(stderr, "ring peer: %s\n", status.ToString().c_str());
  std::fflush(stderr);
  std::_Exit(1);  // as LeaveRank: no static destructors while gRPC's threads still run
}

}  // namespace

int main(int argc, char** argv) {
  if ((argc == 4 || argc == 5) && std::string(argv[1]) == strata::ring_test::kRingPeerFlag) {
    return RunPeerRank(argv[2], std::stoul(argv[3]), argc == 5 ? argv[4] : "tcp");
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
