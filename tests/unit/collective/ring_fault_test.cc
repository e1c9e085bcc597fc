// Faults in the middle of the ring: injected through the in-memory link (a rank killed part-way
// through an operation, a rank whose messages are lost, a lagging rank), and, over gRPC, a real
// peer process killed between operations.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <absl/strings/str_cat.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "bench/allreduce/rank_launcher.h"
#include "services/collective/in_memory_ring_link.h"
#include "services/collective/ring_allreduce.h"
#include "services/common/process/child_process.h"
#include "services/common/wire/rpc.h"
#include "tests/unit/collective/ring_test_support.h"

namespace strata {
namespace {

using ring_test::RunOnAll;
using ring_test::StartRing;
using ring_test::TestRing;
using ring_test::Value;
using ::testing::HasSubstr;

// Runs one average over `world` ranks of `floats` floats each, with small segments so that an
// operation is many messages.
std::vector<absl::Status> AverageOnAll(TestRing& ring, size_t floats,
                                       std::chrono::milliseconds deadline,
                                       std::vector<std::vector<float>>* data) {
  const int world = static_cast<int>(ring.ranks.size());
  data->assign(world, std::vector<float>(floats));
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < floats; ++i) (*data)[r][i] = Value(r, i, 0);
  }
  AllReduceOptions options;
  options.deadline = deadline;
  options.segment_bytes = 1024;
  return RunOnAll(world, [&](int r) {
    return ring.ranks[r].ring->AllReduceAverage((*data)[r].data(), floats, options);
  });
}

// A rank dies after its first few messages: every other rank fails at once (not at the deadline,
// which is long), naming it.
TEST(RingFaults, ARankKilledMidOperationIsNamedAtOnceByEveryOtherRank) {
  const int world = 4;
  TestRing ring = StartRing(world, "memory");
  ring.memory->KillAfterSending(1, 5);
  std::vector<std::vector<float>> data;
  auto statuses = AverageOnAll(ring, 20000, std::chrono::seconds(60), &data);
  for (int r : {0, 2, 3}) {
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kUnavailable)
        << "rank " << r << ": " << statuses[r];
    EXPECT_THAT(std::string(statuses[r].message()), HasSubstr(ring.Name(1)))
        << "rank " << r << ": " << statuses[r];
  }
}

// A rank that runs but whose messages are all lost (a hung connection): the rank after it times
// out naming it, and its abort makes the other ranks name it too.
TEST(RingFaults, ARankWhoseMessagesAreLostIsNamedByEveryOtherRank) {
  const int world = 4;
  TestRing ring = StartRing(world, "memory");
  ring.memory->Silence(2);
  std::vector<std::vector<float>> data;
  auto statuses = AverageOnAll(ring, 5000, std::chrono::seconds(3), &data);
  ASSERT_FALSE(statuses[2].ok());
  for (int r : {0, 1, 3}) {
    ASSERT_FALSE(statuses[r].ok()) << "rank " << r;
    EXPECT_THAT(std::string(statuses[r].message()), HasSubstr(ring.Name(2)))
        << "rank " << r << ": " << statuses[r];
  }
  EXPECT_EQ(statuses[3].code(), absl::StatusCode::kDeadlineExceeded) << statuses[3];
}

// A rank whose messages are lost, as a dead peer looks to a rank waiting on it between its
// operations: the ranks are interrupted (what a Switch naming a lost peer does) and give up with
// that reason instead of waiting out their long deadline. Interrupted before or during the wait,
// the outcome is the same; without the interrupt this test would end in DEADLINE_EXCEEDED.
TEST(RingFaults, AnInterruptedRingGivesUpAtOnceWithTheReason) {
  const int world = 2;
  TestRing ring = StartRing(world, "memory");
  ring.memory->Silence(1);
  std::vector<float> data(5000, 1.0f);
  AllReduceOptions options;
  options.deadline = std::chrono::minutes(10);
  absl::Status status;
  std::thread waiting(
      [&] { status = ring.ranks[0].ring->AllReduceAverage(data.data(), data.size(), options); });
  ring.ranks[0].ring->Interrupt("worker-1 is dead (the orchestrator says so)");
  waiting.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("worker-1 is dead")) << status;
  // The interrupt holds for every later operation too.
  EXPECT_EQ(ring.ranks[0].ring->AllReduceSum(data.data(), data.size(), options).code(),
            absl::StatusCode::kUnavailable);
}

// A lagging rank within the deadline changes nothing in the result.
TEST(RingFaults, ALaggingRankStillGivesTheExactAverage) {
  const int world = 3;
  TestRing ring = StartRing(world, "memory");
  ring.memory->Delay(1, std::chrono::milliseconds(20));
  std::vector<std::vector<float>> data;
  auto statuses = AverageOnAll(ring, 3001, std::chrono::seconds(60), &data);
  for (int r = 0; r < world; ++r) ASSERT_TRUE(statuses[r].ok()) << statuses[r];
  for (size_t i = 0; i < data[0].size(); ++i) {
    float sum = 0;
    for (int r = 0; r < world; ++r) sum += Value(r, i, 0);
    for (int r = 0; r < world; ++r) ASSERT_EQ(data[r][i], sum / world) << "rank " << r << " " << i;
  }
}

// A rank lagging beyond the deadline is named like a silent one.
TEST(RingFaults, ARankLaggingBeyondTheDeadlineIsNamedByEveryOtherRank) {
  const int world = 3;
  TestRing ring = StartRing(world, "memory");
  ring.memory->Delay(0, std::chrono::hours(1));
  std::vector<std::vector<float>> data;
  auto statuses = AverageOnAll(ring, 3001, std::chrono::seconds(2), &data);
  for (int r : {1, 2}) {
    ASSERT_FALSE(statuses[r].ok()) << "rank " << r;
    EXPECT_THAT(std::string(statuses[r].message()), HasSubstr(ring.Name(0)))
        << "rank " << r << ": " << statuses[r];
  }
}

// The ring recovers: after a failed operation, the next one on the same ranks succeeds (late
// messages of the failed one are dropped).
TEST(RingFaults, AnOperationAfterAFailedOneSucceeds) {
  const int world = 3;
  TestRing ring = StartRing(world, "memory");
  std::vector<std::vector<float>> data(world, std::vector<float>(100, 1.0f));
  AllReduceOptions options;
  options.deadline = std::chrono::seconds(1);
  // Rank 2 does not take part in operation 0; ranks 0 and 1 give up on it.
  auto failed = RunOnAll(
      2, [&](int r) { return ring.ranks[r].ring->AllReduceAverage(data[r].data(), 100, options); });
  ASSERT_FALSE(failed[0].ok());
  ASSERT_FALSE(failed[1].ok());
  // Operation numbers advance on every rank that ran one: rank 2 runs a throw-away operation 0
  // alone first (it fails at once or at its deadline), so all three agree on operation 1.
  EXPECT_FALSE(ring.ranks[2].ring->AllReduceAverage(data[2].data(), 100, options).ok());
  options.deadline = std::chrono::seconds(60);
  auto statuses = RunOnAll(world, [&](int r) {
    for (float& x : data[r]) x = static_cast<float>(r);
    return ring.ranks[r].ring->AllReduceAverage(data[r].data(), 100, options);
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    EXPECT_EQ(data[r], std::vector<float>(100, 1.0f)) << "rank " << r;
  }
}

// A real peer process (this binary as rank 1, ring_test_main.cc) is killed between operations:
// the next operation fails at once, naming it, instead of hanging. Over both network links
// ("tcp": gRPC; "plain-tcp": the TCP link, whose connection the kill resets); the in-memory link
// has no process to kill (ARankKilledMidOperationIsNamedAtOnceByEveryOtherRank covers it).
void KillPeerProcessAndExpectItNamed(const std::string& link) {
  char pattern[] = "/tmp/strata-ring-test-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  struct Cleanup {
    std::string dir;
    std::unique_ptr<ChildProcess> peer;  // killed and reaped first if the test ends early
    ~Cleanup() {
      peer.reset();
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } cleanup{dir};

  auto made = bench::MakeRing(0, link);
  ASSERT_TRUE(made.ok()) << made.status();
  RingAllReduce& ring = **made;
  int port = 0;
  auto server = StartServer("127.0.0.1:0", {ring.service()}, &port);
  ASSERT_NE(server, nullptr);
  const size_t n = 4096;
  // The peer shares this process's run token (ChildEnvironment), or the ring's calls are refused.
  SpawnOptions peer;
  peer.name = "ring peer";
  peer.argv = {std::filesystem::read_symlink("/proc/self/exe").string(), ring_test::kRingPeerFlag,
               dir, std::to_string(n), link};
  peer.log_path = dir + "/peer.log";
  auto spawned = ChildProcess::Spawn(peer);
  ASSERT_TRUE(spawned.ok()) << spawned.status();
  cleanup.peer = std::move(*spawned);
  auto peers = bench::ExchangePorts(dir, 0, 2, port, std::chrono::seconds(60));
  ASSERT_TRUE(peers.ok()) << peers.status();
  ASSERT_TRUE(ring.Connect(*peers).ok());

  // The peer's sequence: 3 operations of n floats, a 1-float one, then n-float ones.
  AllReduceOptions options;
  options.deadline = std::chrono::seconds(30);
  std::vector<float> data(n, 3.0f);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(ring.AllReduceAverage(data.data(), n, options).ok());
  float token = 0;
  ASSERT_TRUE(ring.AllReduceAverage(&token, 1, options).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(ring.AllReduceAverage(data.data(), n, options).ok());

  cleanup.peer->Signal(SIGKILL);
  ASSERT_TRUE(cleanup.peer->WaitFor(std::chrono::seconds(60)));
  options.deadline = std::chrono::seconds(5);
  absl::Status status = ring.AllReduceAverage(data.data(), n, options);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(absl::StrCat("rank 1 (", (*peers)[1], ")")))
      << status;
  server->Shutdown();
}

TEST(RingFaults, AKilledPeerProcessIsNamed) {
  for (const char* link : {"tcp", "plain-tcp"}) {
    SCOPED_TRACE(link);
    KillPeerProcessAndExpectItNamed(link);
  }
}

}  // namespace
}  // namespace strata
