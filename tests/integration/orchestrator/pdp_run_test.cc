// PDP and APDP end to end: `strata run` with real processes (sharder, two servers, two workers,
// evaluator) on loopback. The rounds are the server's to decide; the run record must show them:
// RUN_DIR/pdp-rounds.jsonl, `strata status` and summary.json. No assertion depends on speed.
#include <gtest/gtest.h>

#include "tests/integration/orchestrator/cli_test_util.h"

namespace strata::testing {
namespace {

std::string PdpJob(const std::string& name, const std::string& strategy) {
  return "name: " + name + R"(
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist, max_train: 2000, max_test: 500 }
model: { arch: mlp }
training: { epochs: 4, batch_size: 32, lr: 0.05, momentum: 0.9, seed: 1 }
cluster: { workers: 2, parameter_servers: 2 }
sharding: { method: stratified }
strategy: )" +
         strategy + "\n";
}

struct Finished {
  std::vector<nlohmann::json> rounds;
  nlohmann::json summary;
  std::string status;
};

// Runs the job to its end; fails the test (and returns nullopt) if it does not succeed.
std::optional<Finished> RunToEnd(const std::string& job) {
  RunFixture f(job);
  const int code = f.run->Wait(std::chrono::seconds(600));
  EXPECT_EQ(code, 0) << f.run->Output();
  if (code != 0) return std::nullopt;
  Finished out;
  out.rounds = ReadLines(f.run_dir + "/pdp-rounds.jsonl");
  out.summary = ReadJson(f.run_dir + "/summary.json");
  out.status = RunCommand(Strata() + " status " + f.run_dir).output;
  return out;
}

// Every round: one update per worker, shares that add up, and at least the points of one count
// report: no pull goes out before some worker has reported in the round, at K*/(4 workers) of its
// own points, and those points are in its update. (How close a count comes to K* depends on the
// machine's load, so it is measured in docs/results.md, not asserted here.)
void ExpectRoundsDecidedByCounts(const std::vector<nlohmann::json>& rounds, int64_t budget) {
  ASSERT_GE(rounds.size(), 5u);
  int64_t total = 0;
  for (const auto& r : rounds) {
    ASSERT_EQ(r["points"].size(), 2u) << r.dump();
    double shares = 0;
    for (const auto& s : r["shares"]) shares += s.get<double>();
    // A round can be empty: every worker's batch was computing when the pull came (and dropped).
    if (r["count"] > 0) {
      EXPECT_NEAR(shares, 1.0, 1e-9) << r.dump();
    }
    EXPECT_GE(r["count"].get<double>(), r["k_star"].get<double>() / (4 * 2)) << r.dump();
    total += r["count"].get<int64_t>();
  }
  EXPECT_GE(total, budget);  // the rounds end once the job's points are processed
}

TEST(StrataRunPdp, ApdpContributionsAreAtMostOneVersionOldAndTheRoundsAreRecorded) {
  const auto run = RunToEnd(PdpJob("apdp", "{ kind: ps, consistency: apdp, k_star: 256 }"));
  ASSERT_TRUE(run.has_value());
  ExpectRoundsDecidedByCounts(run->rounds, 4 * 2000);
  int64_t gap_one = 0;
  for (const auto& r : run->rounds) {
    EXPECT_EQ(r["k_star"], 256);
    EXPECT_EQ(r["mode"], "apdp");
    for (const auto& gap : r["version_gaps"]) {
      EXPECT_TRUE(gap == 0 || gap == 1) << r.dump();
      gap_one += gap == 1;
    }
  }
  // Workers computed on while the new model travelled: most contributions hold such points.
  EXPECT_GT(gap_one, 0);
  EXPECT_NE(run->status.find("rounds:    apdp, " + std::to_string(run->rounds.size()) +
                             " closed, K* 256 (fixed)"),
            std::string::npos)
      << run->status;
  EXPECT_NE(run->status.find("gaps:    contributions by version gap {"), std::string::npos);
  EXPECT_EQ(run->summary["pdp_rounds"]["rounds"], run->rounds.size());
  // It learned (chance is 0.1). How well is not asserted: with server-side momentum, APDP's
  // one-version-stale rounds are unsteady on this small job (docs/results.md, "PDP and APDP").
  EXPECT_GT(run->summary["final_val_acc"].get<double>(), 0.2) << run->summary.dump(2);
}

TEST(StrataRunPdp, PdpSearchesKStarAndEveryContributionIsOnTheCurrentModel) {
  const auto run = RunToEnd(PdpJob("pdp", "{ kind: ps, consistency: pdp, probe_ratio: 0.1 }"));
  ASSERT_TRUE(run.has_value());
  ExpectRoundsDecidedByCounts(run->rounds, 4 * 2000);
  for (const auto& r : run->rounds) {
    EXPECT_EQ(r["version_gaps"], nlohmann::json({0, 0})) << r.dump();
  }
  // Probing came first: the first rounds probe the first candidate, a quarter of the probe
  // window of 0.1 x 2000 points (above the floor of one 16-point batch per worker).
  EXPECT_TRUE(run->rounds.front()["probing"].get<bool>());
  EXPECT_EQ(run->rounds.front()["k_star"], 50);
  const auto searched = run->summary["pdp_rounds"]["k_star_searched"];
  ASSERT_GE(searched.size(), 2u) << run->summary.dump(2);
  EXPECT_EQ(searched[0], 50);
  EXPECT_NE(run->status.find("(searched 50 -> "), std::string::npos) << run->status;
  EXPECT_GT(run->summary["final_val_acc"].get<double>(), 0.5) << run->summary.dump(2);
}

}  // namespace
}  // namespace strata::testing
