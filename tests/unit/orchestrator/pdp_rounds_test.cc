// The summary of a pdp or apdp run's rounds (pdp-rounds.jsonl) that `strata status` prints and
// summary.json keeps: hand-made rounds, one of them a line that is not a round.
#include <gtest/gtest.h>

#include "orchestrator/record/pdp_rounds.h"

namespace strata {
namespace {

nlohmann::json Round(int64_t round, int64_t k, bool probing, int64_t count,
                     std::vector<double> shares, std::vector<int64_t> gaps, double round_s) {
  return {{"round", round},     {"mode", "apdp"},       {"k_star", k},
          {"probing", probing}, {"predicted", k},       {"count", count},
          {"shares", shares},   {"version_gaps", gaps}, {"round_s", round_s}};
}

TEST(PdpRoundsTest, SumsUpTheSearchTheCountsTheSharesAndTheGaps) {
  const std::vector<nlohmann::json> rounds = {
      Round(1, 100, true, 110, {0.5, 0.5}, {0, 0}, 1.0),
      Round(2, 100, true, 90, {0.6, 0.4}, {1, 1}, 1.0),
      Round(3, 200, true, 200, {0.7, 0.3}, {1, 0}, 1.0),
      nlohmann::json{{"note", "not a round"}},
      Round(4, 200, false, 260, {0.8, 0.2}, {1, 1}, 1.0),
  };
  const PdpRoundsSummary s = SummarisePdpRounds(rounds);
  EXPECT_EQ(s.mode, "apdp");
  EXPECT_EQ(s.rounds, 4);
  EXPECT_EQ(s.k_star, 200);
  EXPECT_EQ(s.searched, (std::vector<int64_t>{100, 200}));
  EXPECT_DOUBLE_EQ(s.probing_fraction, 0.75);
  EXPECT_DOUBLE_EQ(s.count_error_mean, (0.1 + 0.1 + 0 + 0.3) / 4);
  EXPECT_DOUBLE_EQ(s.count_error_p95, 0.3);
  ASSERT_EQ(s.mean_shares.size(), 2u);
  EXPECT_DOUBLE_EQ(s.mean_shares[1], (0.5 + 0.4 + 0.3 + 0.2) / 4);
  EXPECT_EQ(s.version_gaps, (std::map<int64_t, int64_t>{{0, 3}, {1, 5}}));
  EXPECT_EQ(s.last_round, 4);
  EXPECT_EQ(s.last_count, 260);
  const std::vector<std::string> lines = PdpRoundsLines(s);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(
      lines[0],
      "rounds:    apdp, 4 closed, K* 200 (searched 100 -> 200; probing took 75% of the time)");
  EXPECT_EQ(lines[2], "  shares:  mean w0 65%, w1 35%; last round w0 80%, w1 20%");
  EXPECT_EQ(lines[3], "  gaps:    contributions by version gap {0: 3, 1: 5}");
  EXPECT_EQ(PdpRoundsJson(s)["version_gaps"]["1"], 5);
}

TEST(PdpRoundsTest, NoRoundsYetSaysSo) {
  EXPECT_EQ(PdpRoundsLines(SummarisePdpRounds({})),
            std::vector<std::string>{"rounds:    none closed yet"});
}

}  // namespace
}  // namespace strata
