// The rounds of a pdp or apdp job as the run record keeps them (RUN_DIR/pdp-rounds.jsonl, one
// line per round, written by partition 0's server), summed up for `strata status` and
// summary.json: K* and how it was found, how close each round's global count came to K*, each
// worker's share of the points, and the version gap of every contribution.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata {

struct PdpRoundsSummary {
  std::string mode;  // "pdp" or "apdp"
  int64_t rounds = 0;
  int64_t k_star = 0;             // in force in the last round
  std::vector<int64_t> searched;  // the candidates probed, in order (empty: K* fixed)
  double probing_fraction = 0;    // of the rounds' time, spent probing candidates
  double count_error_mean = 0;    // |count - K*| / K*, over the rounds
  double count_error_p95 = 0;
  std::vector<double> mean_shares;          // per worker, over the rounds
  std::map<int64_t, int64_t> version_gaps;  // gap -> contributions
  // The last round.
  int64_t last_round = 0, last_count = 0;
  double last_predicted = 0;
  std::vector<double> last_shares;
};

// Lines that are not rounds (a malformed or foreign object) are skipped.
PdpRoundsSummary SummarisePdpRounds(const std::vector<nlohmann::json>& rounds);

// For `strata status`: a few lines, each without its newline.
std::vector<std::string> PdpRoundsLines(const PdpRoundsSummary& summary);

nlohmann::json PdpRoundsJson(const PdpRoundsSummary& summary);

}  // namespace strata
