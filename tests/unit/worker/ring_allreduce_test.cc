// Ring all-reduce with N ranks inside one process: each rank has its own gRPC server on
// 127.0.0.1:0 and its own RingAllReduce, and runs its operation on its own thread.
#include "services/worker/ring_allreduce.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <absl/strings/str_cat.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "bench/allreduce/rank_launcher.h"
#include "services/common/rpc.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

struct Rank {
  std::unique_ptr<RingAllReduce> ring;
  std::unique_ptr<grpc::Server> server;  // declared after ring: shut down before it
  std::string address;
};

// transport "tcp": the ranks dial each other on 127.0.0.1; "unix": on abstract Unix sockets, as
// the local launcher's workers do.
std::vector<Rank> StartRing(int world, const std::string& transport = "tcp") {
  static int rings = 0;  // abstract socket names are machine-wide: keep them unique
  ++rings;
  std::vector<Rank> ranks(world);
  std::vector<std::string> peers;
  for (int r = 0; r < world; ++r) {
    ranks[r].ring = std::make_unique<RingAllReduce>(r);
    int port = 0;
    const std::string unix_address =
        absl::StrCat("unix-abstract:strata-ring-test-", getpid(), "-", rings, "-", r);
    std::vector<std::string> also_listen;
    if (transport == "unix") also_listen.push_back(unix_address);
    ranks[r].server = StartServer("127.0.0.1:0", {ranks[r].ring->service()}, &port, also_listen);
    EXPECT_NE(ranks[r].server, nullptr);
    EXPECT_GT(port, 0);
    ranks[r].address = transport == "unix" ? unix_address : absl::StrCat("127.0.0.1:", port);
    peers.push_back(ranks[r].address);
  }
  for (auto& rank : ranks) EXPECT_TRUE(rank.ring->Connect(peers).ok());
  return ranks;
}

// Runs fn(rank) on one thread per rank; fails the test instead of hanging if any thread does not
// return within a generous bound.
std::vector<absl::Status> RunOnAll(int world, const std::function<absl::Status(int)>& fn) {
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
float Value(int rank, size_t i, int op) {
  return static_cast<float>(static_cast<int>((i * 7 + rank * 13 + op * 5) % 201) - 100);
}

class RingAverage : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(RingAverage, EveryRankHoldsExactlyTheAverage) {
  const auto& [world, transport] = GetParam();
  std::vector<Rank> ranks = StartRing(world, transport);
  struct Case {
    size_t floats;
    size_t segment_bytes;
  };
  // Sizes below, at and above the world size, not divisible by it; segments from one float
  // (a float may then straddle gRPC slices) to larger than a chunk.
  const std::vector<Case> cases = {{1, 4},
                                   {2, 4},
                                   {3, 8},
                                   {5, 12},
                                   {17, 4},
                                   {1000, 64},
                                   {4099, 1000},
                                   {100003, 16 << 10},
                                   {262147, 256 << 10}};
  int op = 0;
  for (const Case& c : cases) {
    for (int repeat = 0; repeat < 2; ++repeat, ++op) {
      std::vector<std::vector<float>> data(world, std::vector<float>(c.floats));
      for (int r = 0; r < world; ++r) {
        for (size_t i = 0; i < c.floats; ++i) data[r][i] = Value(r, i, op);
      }
      AllReduceOptions options;
      options.deadline = std::chrono::seconds(60);
      options.segment_bytes = c.segment_bytes;
      auto statuses = RunOnAll(world, [&](int r) {
        return ranks[r].ring->AllReduceAverage(data[r].data(), c.floats, options);
      });
      for (int r = 0; r < world; ++r)
        ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
      for (size_t i = 0; i < c.floats; ++i) {
        float sum = 0;
        for (int r = 0; r < world; ++r) sum += Value(r, i, op);
        const float expected = sum / static_cast<float>(world);
        for (int r = 0; r < world; ++r) {
          ASSERT_EQ(data[r][i], expected) << "rank " << r << " element " << i << " of " << c.floats
                                          << " (world " << world << ", op " << op << ")";
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, RingAverage,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5),
                                            ::testing::Values("tcp")));
INSTANTIATE_TEST_SUITE_P(UnixSockets, RingAverage,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Values("unix")));

TEST(RingAllReduce, SumWithZerosElsewhereBroadcastsRankZeroBitForBit) {
  const int world = 3;
  std::vector<Rank> ranks = StartRing(world);
  const size_t n = 12345;
  std::vector<float> source(n);
  for (size_t i = 0; i < n; ++i)
    source[i] = 0.1f * static_cast<float>(i) - 3.3e-7f * static_cast<float>(i * i);
  std::vector<std::vector<float>> data(world, std::vector<float>(n, 0.0f));
  data[0] = source;
  auto statuses = RunOnAll(world, [&](int r) {
    return ranks[r].ring->AllReduceSum(data[r].data(), n, AllReduceOptions{});
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(data[r], source) << "rank " << r;
  }
}

TEST(RingAllReduce, AutomaticSegmentsAreHalfAChunkBetweenOneAndEightMiB) {
  EXPECT_EQ(AutoSegmentBytes(262144, 2), size_t{1} << 20);           // 1 MiB buffer: the floor
  EXPECT_EQ(AutoSegmentBytes(6553600, 4), size_t{3276800});          // 25 MiB over 4: half a chunk
  EXPECT_EQ(AutoSegmentBytes(6553600, 2), size_t{6553600});          // 25 MiB over 2
  EXPECT_EQ(AutoSegmentBytes(size_t{1} << 28, 2), size_t{8} << 20);  // 1 GiB: the ceiling
  EXPECT_EQ(AutoSegmentBytes(1, 1), size_t{1} << 20);
}

TEST(RingAllReduce, WorldOfOneLeavesTheBufferAlone) {
  RingAllReduce ring(0);
  ASSERT_TRUE(ring.Connect({"127.0.0.1:1"}).ok());
  std::vector<float> data = {1.5f, -2.0f, 3.25f};
  ASSERT_TRUE(ring.AllReduceAverage(data.data(), data.size(), AllReduceOptions{}).ok());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f, 3.25f}));
}

TEST(RingAllReduce, BadUseIsRefusedWithAClearError) {
  RingAllReduce unconnected(0);
  float x = 1;
  EXPECT_THAT(std::string(unconnected.AllReduceAverage(&x, 1, {}).message()), HasSubstr("Connect"));
  RingAllReduce ring(3);
  absl::Status status = ring.Connect({"127.0.0.1:1", "127.0.0.1:2"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("rank 3"));
}

TEST(RingAllReduce, DifferentSizesOnTwoRanksFailNamingTheMismatch) {
  std::vector<Rank> ranks = StartRing(2);
  std::vector<std::vector<float>> data = {std::vector<float>(10, 1.0f),
                                          std::vector<float>(12, 1.0f)};
  AllReduceOptions options;
  options.deadline = std::chrono::seconds(10);
  auto statuses = RunOnAll(2, [&](int r) {
    return ranks[r].ring->AllReduceAverage(data[r].data(), data[r].size(), options);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(statuses[r].ok()) << "rank " << r;
    EXPECT_THAT(std::string(statuses[r].message()), HasSubstr("same number of floats"))
        << statuses[r];
  }
}

// A rank whose server is gone (the process died): its neighbours fail fast or at the deadline,
// and every error names it with its address.
TEST(RingAllReduce, ADeadPeerIsNamedByEveryRank) {
  // Over Unix sockets the ring's connection is made at Connect(), before the peer goes away.
  for (const std::string transport : {"tcp", "unix"}) {
    SCOPED_TRACE(transport);
    const int world = 3;
    std::vector<Rank> ranks = StartRing(world, transport);
    ranks[2].server->Shutdown();
    const std::string dead = absl::StrCat("rank 2 (", ranks[2].address, ")");
    std::vector<std::vector<float>> data(2, std::vector<float>(1000, 1.0f));
    AllReduceOptions options;
    options.deadline = std::chrono::seconds(3);
    auto statuses = RunOnAll(
        2, [&](int r) { return ranks[r].ring->AllReduceAverage(data[r].data(), 1000, options); });
    for (int r = 0; r < 2; ++r) {
      ASSERT_FALSE(statuses[r].ok()) << "rank " << r;
      EXPECT_THAT(std::string(statuses[r].message()), HasSubstr(dead))
          << "rank " << r << ": " << statuses[r];
    }
  }
}

// A rank that is up but never takes part (stopped, hung): nobody hangs; the rank after it times
// out naming it, and the abort it sends on makes the other ranks name it too.
TEST(RingAllReduce, ASilentPeerIsNamedByEveryRankAfterTheDeadline) {
  const int world = 4;
  std::vector<Rank> ranks = StartRing(world);
  const std::string silent = absl::StrCat("rank 2 (", ranks[2].address, ")");
  std::vector<std::vector<float>> data(world, std::vector<float>(5000, 1.0f));
  AllReduceOptions options;
  options.deadline = std::chrono::seconds(3);
  options.segment_bytes = 1024;
  auto statuses = RunOnAll(world, [&](int r) {
    if (r == 2) return absl::OkStatus();
    return ranks[r].ring->AllReduceAverage(data[r].data(), data[r].size(), options);
  });
  // Segments are sent straight from these buffers; a failed operation must have taken them back
  // from gRPC before returning (an AddressSanitizer build reports any later read).
  data.clear();
  data.shrink_to_fit();
  for (int r : {0, 1, 3}) {
    ASSERT_FALSE(statuses[r].ok()) << "rank " << r;
    EXPECT_THAT(std::string(statuses[r].message()), HasSubstr(silent))
        << "rank " << r << ": " << statuses[r];
  }
  EXPECT_EQ(statuses[3].code(), absl::StatusCode::kDeadlineExceeded) << statuses[3];
}

#ifdef STRATA_BENCH_ALLREDUCE
// A real peer process (strata-bench-allreduce running one rank) is killed between operations:
// the next operation fails at once, naming it, instead of hanging.
TEST(RingAllReduce, AKilledPeerProcessIsNamed) {
  char pattern[] = "/tmp/strata-ring-test-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  struct Cleanup {
    std::string dir;
    pid_t child = -1;
    ~Cleanup() {
      if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, nullptr, 0);
      }
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } cleanup{dir};

  RingAllReduce ring(0);
  int port = 0;
  auto server = StartServer("127.0.0.1:0", {ring.service()}, &port);
  ASSERT_NE(server, nullptr);
  const size_t n = 4096;
  std::vector<std::string> args = {STRATA_BENCH_ALLREDUCE,
                                   "--world",
                                   "2",
                                   "--floats",
                                   std::to_string(n),
                                   "--iters",
                                   "1000000000",
                                   "--warmup",
                                   "3",
                                   "--rank",
                                   "1",
                                   "--dir",
                                   dir};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ASSERT_EQ(posix_spawn(&cleanup.child, argv[0], nullptr, nullptr, argv.data(), environ), 0);
  auto peers = bench::ExchangePorts(dir, 0, 2, port, std::chrono::seconds(60));
  ASSERT_TRUE(peers.ok()) << peers.status();
  ASSERT_TRUE(ring.Connect(*peers).ok());

  // The child's sequence: 3 warm-up operations of n floats, a 1-float barrier, then n-float ones.
  AllReduceOptions options;
  options.deadline = std::chrono::seconds(30);
  std::vector<float> data(n, 3.0f);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(ring.AllReduceAverage(data.data(), n, options).ok());
  float token = 0;
  ASSERT_TRUE(ring.AllReduceAverage(&token, 1, options).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(ring.AllReduceAverage(data.data(), n, options).ok());

  ASSERT_EQ(kill(cleanup.child, SIGKILL), 0);
  ASSERT_EQ(waitpid(cleanup.child, nullptr, 0), cleanup.child);
  cleanup.child = -1;
  options.deadline = std::chrono::seconds(5);
  absl::Status status = ring.AllReduceAverage(data.data(), n, options);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(absl::StrCat("rank 1 (", (*peers)[1], ")")))
      << status;
}
#endif

}  // namespace
}  // namespace strata
