// PDP's decision of when to update, in process: the K* search on synthetic gain curves, the
// probe gain's sign, and the coordinator driven by hand-made reports (no gRPC, no training). No
// assertion depends on timing: a pull is made due by reports that already reach K*.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "services/parameter_server/pdp/k_star_search.h"
#include "services/parameter_server/pdp/pull_coordinator.h"

namespace strata {
namespace {

// Probes the search to its end on `gain(k)`; returns the candidates in the order probed.
std::vector<int64_t> Visit(KStarSearch& search, const std::function<double(int64_t)>& gain,
                           int64_t measured_floor = 0) {
  std::vector<int64_t> visited;
  for (int guard = 0; !search.done() && guard < 64; ++guard) {
    visited.push_back(search.k());
    search.Record(gain(search.k()), measured_floor);
  }
  EXPECT_TRUE(search.done());
  return visited;
}

// A gain curve with its peak at `best` (symmetric in log2 k).
std::function<double(int64_t)> PeakAt(double best) {
  return [best](int64_t k) {
    const double d = std::log2(static_cast<double>(k)) - std::log2(best);
    return 1.0 - d * d;
  };
}

KStarSearchOptions Options() {
  KStarSearchOptions o;
  o.start = 1200;
  o.floor = 64;
  o.ceiling = 6000;
  o.probe_points = 3000;
  return o;
}

TEST(KStarSearchTest, HalvesWhileHalfDoesBetterAndTakesTheBest) {
  KStarSearch search(Options());
  EXPECT_EQ(Visit(search, PeakAt(300)), (std::vector<int64_t>{1200, 600, 300, 150}));
  EXPECT_EQ(search.k(), 300);
  EXPECT_EQ(search.Describe().substr(search.Describe().size() - 8), ": K* 300");
}

TEST(KStarSearchTest, DoublesFromTheFirstCandidateWhenHalfDoesWorseUpToTheCeiling) {
  KStarSearch search(Options());
  EXPECT_EQ(Visit(search, PeakAt(2400)), (std::vector<int64_t>{1200, 600, 2400, 4800}));
  EXPECT_EQ(search.k(), 2400);
  KStarSearch to_ceiling(Options());
  EXPECT_EQ(Visit(to_ceiling, PeakAt(100000)), (std::vector<int64_t>{1200, 600, 2400, 4800}));
  EXPECT_EQ(to_ceiling.k(), 4800);  // 9600 would pass the ceiling of 6000
}

TEST(KStarSearchTest, StopsHalvingAtTheFloorAndAtTheMeasuredCostOfAPull) {
  KStarSearch search(Options());
  EXPECT_EQ(Visit(search, PeakAt(10)), (std::vector<int64_t>{1200, 600, 300, 150, 75}));
  EXPECT_EQ(search.k(), 75);  // 37 is below the floor of 64
  KStarSearch measured(Options());
  // A pull costs what the workers process in 500 points' time: nothing below that is probed.
  EXPECT_EQ(Visit(measured, PeakAt(10), 500), (std::vector<int64_t>{1200, 600}));
  EXPECT_EQ(measured.k(), 600);
}

TEST(KStarSearchTest, ProbesHoldAtLeastFourPullsAndADivergedProbeIsTheWorst) {
  KStarSearch search(Options());
  EXPECT_EQ(search.WindowPoints(), 4800);  // 4 x 1200 > 3000
  search.Record(std::nan(""));
  EXPECT_EQ(search.k(), 600);
  EXPECT_EQ(search.WindowPoints(), 3000);
  search.Record(0.5);
  EXPECT_EQ(search.k(), 300);
  search.Record(0.2);
  EXPECT_TRUE(search.done());
  EXPECT_EQ(search.k(), 600);
}

TEST(KStarSearchTest, RefusesOptionsItCannotStartFrom) {
  KStarSearchOptions o = Options();
  o.start = 32;
  EXPECT_EQ(ValidateKStarSearch(o).code(), absl::StatusCode::kInvalidArgument);
  o = Options();
  o.probe_points = 0;
  EXPECT_EQ(ValidateKStarSearch(o).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateKStarSearch(Options()).ok());
}

TEST(ProbeGainTest, AFallingLossIsAPositiveGainRelativeToItsLevel) {
  // The paper's Q(after) - Q(before) would be negative here (its sign error for minimised
  // losses); Strata's gain is the improvement.
  const std::vector<ProbeRound> falling = {{0, 2.0}, {1, 1.8}, {2, 1.6}, {3, 1.4}};
  EXPECT_NEAR(ProbeGain(falling), 0.2 / 1.7, 1e-9);
  const std::vector<ProbeRound> rising = {{0, 1.0}, {1, 1.1}};
  EXPECT_LT(ProbeGain(rising), 0);
  EXPECT_EQ(ProbeGain({{0, 1.0}}), 0);
  EXPECT_EQ(ProbeGain({{0, 1.0}, {1, std::nan("")}}), 0);
}

// --- The coordinator -------------------------------------------------------------------------

PullCoordinatorOptions Fixed(int workers, int64_t k_star) {
  PullCoordinatorOptions o;
  o.mode = v1::CONSISTENCY_APDP;
  o.workers = workers;
  o.fixed_k_star = k_star;
  o.round_deadline = std::chrono::seconds(60);
  return o;
}

std::chrono::system_clock::time_point Patient() {  // a safety net against hangs
  return std::chrono::system_clock::now() + std::chrono::seconds(60);
}

CountReportView Count(int worker, int64_t round, int64_t points, double seconds = 0.5) {
  CountReportView r;
  r.worker = worker;
  r.round = round;
  r.points = points;
  r.seconds = seconds;
  return r;
}

CountReportView Update(int worker, int64_t round, int64_t points, int64_t gap) {
  CountReportView r = Count(worker, round, points);
  r.update = true;
  r.loss = 1.5;
  r.version_used = round - 1 - gap;
  r.version_gap = gap;
  return r;
}

TEST(PullCoordinatorTest, PullsOnceTheReportsReachKStarAndRecordsTheRound) {
  // A name of this process's own: two suites on one machine must not share the file.
  const std::string file =
      ::testing::TempDir() + "/pdp-rounds-" + std::to_string(::getpid()) + ".jsonl";
  std::filesystem::remove(file);
  PullCoordinatorOptions o = Fixed(2, 100);
  o.rounds_file = file;
  auto made = PullCoordinator::Create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  PullCoordinator& c = **made;
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(c.Subscribe(w).ok());
  auto announced = c.Next(-1, Patient(), {});
  ASSERT_TRUE(announced.has_value());
  EXPECT_EQ(announced->round, 0);
  EXPECT_EQ(announced->k_star, 100);
  c.Start();
  ASSERT_TRUE(c.Report(Count(0, 1, 75)).ok());
  ASSERT_TRUE(c.Report(Count(1, 1, 25)).ok());  // 100 points: the pull is due now
  auto pull = c.Next(0, Patient(), {});
  ASSERT_TRUE(pull.has_value());
  EXPECT_EQ(pull->round, 1);
  EXPECT_FALSE(pull->end);
  ASSERT_TRUE(c.Report(Update(0, 1, 80, 0)).ok());
  // APDP: worker 0 counts on in round 2 while worker 1's update is still coming.
  ASSERT_TRUE(c.Report(Count(0, 2, 20)).ok());
  ASSERT_TRUE(c.Report(Update(1, 1, 30, 1)).ok());
  auto next = c.Next(1, Patient(), {});  // round 2 is pulled once it reaches K* too
  ASSERT_TRUE(c.Report(Count(0, 2, 60)).ok());
  ASSERT_TRUE(c.Report(Count(1, 2, 60)).ok());
  next = c.Next(1, Patient(), {});
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->round, 2);
  c.Stop();
  const std::vector<RoundRecord> rounds = c.Rounds();
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(rounds[0].count, 110);
  EXPECT_EQ(rounds[0].points, (std::vector<int64_t>{80, 30}));
  EXPECT_EQ(rounds[0].version_gaps, (std::vector<int64_t>{0, 1}));
  EXPECT_DOUBLE_EQ(rounds[0].loss, 1.5);
  std::ifstream in(file);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const nlohmann::json record = nlohmann::json::parse(line);
  EXPECT_EQ(record["round"], 1);
  EXPECT_EQ(record["mode"], "apdp");
  EXPECT_EQ(record["k_star"], 100);
  EXPECT_EQ(record["count"], 110);
  EXPECT_NEAR(record["shares"][0].get<double>(), 80.0 / 110, 1e-12);
  EXPECT_EQ(record["version_gaps"], nlohmann::json({0, 1}));
  in.close();
  std::filesystem::remove(file);
}

TEST(PullCoordinatorTest, BadReportsAreRefusedAndChangeNothing) {
  auto made = PullCoordinator::Create(Fixed(2, 1000));
  ASSERT_TRUE(made.ok());
  PullCoordinator& c = **made;
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(c.Subscribe(w).ok());
  EXPECT_EQ(c.Subscribe(2).status().code(), absl::StatusCode::kInvalidArgument);
  c.Start();
  auto unknown = c.Report(Count(7, 1, 10));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("worker 7"), std::string::npos);
  ASSERT_TRUE(c.Report(Count(0, 1, 60)).ok());
  auto backwards = c.Report(Count(0, 1, 40));
  EXPECT_EQ(backwards.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(backwards.status().message().find("counts go backwards, 40 after 60"),
            std::string::npos)
      << backwards.status().message();
  EXPECT_EQ(c.Report(Count(0, 1, 10, std::nan(""))).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Report(Count(0, 1, -5)).status().code(), absl::StatusCode::kInvalidArgument);
  auto far = c.Report(Count(1, 5, 10));
  EXPECT_EQ(far.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(far.status().message().find("in round 1"), std::string::npos);
  // No pull request went out: an update is out of place.
  auto early = c.Report(Update(1, 1, 10, 0));
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
  // The counts the refusals left alone still work: 60 + 940 reach K*.
  ASSERT_TRUE(c.Report(Count(0, 1, 80)).ok());
  ASSERT_TRUE(c.Report(Count(1, 1, 920)).ok());
  auto pull = c.Next(0, Patient(), {});
  ASSERT_TRUE(pull.has_value());
  EXPECT_EQ(pull->round, 1);
  ASSERT_TRUE(c.Report(Update(0, 1, 90, 0)).ok());
  EXPECT_EQ(c.Report(Update(0, 1, 90, 0)).status().code(), absl::StatusCode::kAlreadyExists);
  auto nan_loss = Update(1, 1, 900, 0);
  nan_loss.loss = std::nan("");
  EXPECT_EQ(c.Report(nan_loss).status().code(), absl::StatusCode::kInvalidArgument);
  c.Stop();
  EXPECT_TRUE(c.Rounds().empty());  // worker 1's update never came
}

TEST(PullCoordinatorTest, EndsTheRoundsOnceTheJobsPointsAreProcessed) {
  PullCoordinatorOptions o = Fixed(1, 50);
  o.sample_budget = 100;
  auto made = PullCoordinator::Create(o);
  ASSERT_TRUE(made.ok());
  PullCoordinator& c = **made;
  ASSERT_TRUE(c.Subscribe(0).ok());
  c.Start();
  for (int64_t round = 1; round <= 2; ++round) {
    ASSERT_TRUE(c.Report(Count(0, round, 50)).ok());
    auto pull = c.Next(round - 1, Patient(), {});
    ASSERT_TRUE(pull.has_value());
    ASSERT_EQ(pull->round, round);
    ASSERT_TRUE(c.Report(Update(0, round, 50, 0)).ok());
  }
  auto end = c.Next(2, Patient(), {});
  ASSERT_TRUE(end.has_value());
  EXPECT_TRUE(end->end);
  EXPECT_EQ(c.Rounds().size(), 2u);
}

TEST(PullCoordinatorTest, RefusesOptionsItCannotRunWith) {
  PullCoordinatorOptions o = Fixed(0, 10);
  EXPECT_EQ(PullCoordinator::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Fixed(2, 0);  // search, with no valid search options
  EXPECT_EQ(PullCoordinator::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Fixed(2, 10);
  o.mode = v1::CONSISTENCY_BSP;
  EXPECT_EQ(PullCoordinator::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata
