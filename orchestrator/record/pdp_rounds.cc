#include "orchestrator/record/pdp_rounds.h"

#include <algorithm>
#include <cmath>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>

namespace strata {
namespace {

std::string Percentages(const std::vector<double>& shares) {
  std::vector<std::string> parts;
  for (size_t w = 0; w < shares.size(); ++w) {
    parts.push_back(absl::StrFormat("w%d %.0f%%", w, 100 * shares[w]));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace

PdpRoundsSummary SummarisePdpRounds(const std::vector<nlohmann::json>& rounds) {
  PdpRoundsSummary s;
  std::vector<double> errors;
  double total_s = 0, probing_s = 0;
  for (const nlohmann::json& r : rounds) {
    if (!r.is_object() || !r.contains("round") || !r["k_star"].is_number_integer() ||
        !r["count"].is_number_integer() || !r["shares"].is_array() ||
        !r["version_gaps"].is_array()) {
      continue;
    }
    ++s.rounds;
    s.mode = r.value("mode", "");
    s.k_star = r["k_star"].get<int64_t>();
    const bool probing = r.value("probing", false);
    if (probing && (s.searched.empty() || s.searched.back() != s.k_star)) {
      s.searched.push_back(s.k_star);
    }
    const double round_s = r.value("round_s", 0.0);
    total_s += round_s;
    if (probing) probing_s += round_s;
    if (s.k_star > 0) {
      errors.push_back(std::fabs(static_cast<double>(r["count"].get<int64_t>() - s.k_star)) /
                       static_cast<double>(s.k_star));
    }
    const auto& shares = r["shares"];
    if (s.mean_shares.size() < shares.size()) s.mean_shares.resize(shares.size(), 0.0);
    s.last_shares.clear();
    for (size_t w = 0; w < shares.size(); ++w) {
      const double share = shares[w].is_number() ? shares[w].get<double>() : 0.0;
      s.mean_shares[w] += share;
      s.last_shares.push_back(share);
    }
    for (const auto& gap : r["version_gaps"]) {
      if (gap.is_number_integer()) ++s.version_gaps[gap.get<int64_t>()];
    }
    s.last_round = r["round"].is_number_integer() ? r["round"].get<int64_t>() : s.rounds;
    s.last_count = r["count"].get<int64_t>();
    s.last_predicted = r.value("predicted", 0.0);
  }
  for (double& share : s.mean_shares) share /= static_cast<double>(std::max<int64_t>(s.rounds, 1));
  if (!errors.empty()) {
    double sum = 0;
    for (double e : errors) sum += e;
    s.count_error_mean = sum / static_cast<double>(errors.size());
    std::sort(errors.begin(), errors.end());
    s.count_error_p95 = errors[std::min(
        errors.size() - 1, static_cast<size_t>(0.95 * static_cast<double>(errors.size())))];
  }
  s.probing_fraction = total_s > 0 ? probing_s / total_s : 0;
  return s;
}

std::vector<std::string> PdpRoundsLines(const PdpRoundsSummary& s) {
  std::vector<std::string> lines;
  if (s.rounds == 0) return {"rounds:    none closed yet"};
  std::vector<std::string> searched;
  for (int64_t k : s.searched) searched.push_back(absl::StrCat(k));
  lines.push_back(absl::StrFormat(
      "rounds:    %s, %d closed, K* %d (%s)", s.mode, s.rounds, s.k_star,
      s.searched.empty()
          ? "fixed"
          : absl::StrFormat("searched %s; probing took %.0f%% of the time",
                            absl::StrJoin(searched, " -> "), 100 * s.probing_fraction)));
  lines.push_back(absl::StrFormat(
      "  count:   |count - K*| / K* mean %.1f%%, p95 %.1f%%; round %d: %d points, predicted %.0f",
      100 * s.count_error_mean, 100 * s.count_error_p95, s.last_round, s.last_count,
      s.last_predicted));
  lines.push_back(absl::StrFormat("  shares:  mean %s; last round %s", Percentages(s.mean_shares),
                                  Percentages(s.last_shares)));
  std::vector<std::string> gaps;
  for (const auto& [gap, n] : s.version_gaps) gaps.push_back(absl::StrCat(gap, ": ", n));
  lines.push_back(
      absl::StrCat("  gaps:    contributions by version gap {", absl::StrJoin(gaps, ", "), "}"));
  return lines;
}

nlohmann::json PdpRoundsJson(const PdpRoundsSummary& s) {
  nlohmann::json gaps = nlohmann::json::object();
  for (const auto& [gap, n] : s.version_gaps) gaps[absl::StrCat(gap)] = n;
  return {{"mode", s.mode},
          {"rounds", s.rounds},
          {"k_star", s.k_star},
          {"k_star_searched", s.searched},
          {"probing_fraction", s.probing_fraction},
          {"count_error_mean", s.count_error_mean},
          {"count_error_p95", s.count_error_p95},
          {"mean_shares", s.mean_shares},
          {"version_gaps", gaps}};
}

}  // namespace strata
