#include "orchestrator/run/switch_rule.h"

#include <cmath>
#include <limits>

#include <absl/strings/str_format.h>

#include "services/common/config/resolved_job.h"

namespace strata {

std::optional<double> EmpiricalSwitchRule::MeanRelativeChangePercent(
    const std::vector<double>& v) const {
  const size_t w = static_cast<size_t>(std::max(options_.window, 1));
  if (v.size() < w + 1) return std::nullopt;
  const size_t k = v.size() - 1;
  double sum = 0;
  for (size_t j = 0; j < w; ++j) {
    const double now = v[k - j], before = v[k - j - 1];
    if (!std::isfinite(now) || !std::isfinite(before))
      return std::numeric_limits<double>::infinity();
    const double change = std::fabs(now - before);
    if (before == 0) {
      if (change == 0) continue;
      return std::numeric_limits<double>::infinity();
    }
    sum += change / (static_cast<double>(w) * std::fabs(before));
  }
  return sum * 100.0;
}

SwitchDecision EmpiricalSwitchRule::Decide(const std::vector<double>& val_losses) const {
  SwitchDecision d;
  d.s_percent = MeanRelativeChangePercent(val_losses);
  if (!d.s_percent) {
    d.reason = absl::StrFormat("empirical rule: %d of %d validation losses so far",
                               val_losses.size(), options_.window + 1);
    return d;
  }
  d.fire = *d.s_percent < options_.threshold_percent;
  d.reason = absl::StrFormat(
      "empirical rule: s = %.4f%% over the last %d epochs %s threshold %.4g%%", *d.s_percent,
      options_.window, d.fire ? "<" : ">=", options_.threshold_percent);
  return d;
}

int64_t AtFractionSwitchRule::SwitchEpoch() const {
  return AtFractionSwitchEpoch(fraction_, total_epochs_);
}

SwitchDecision AtFractionSwitchRule::Decide(int64_t completed_epochs) const {
  SwitchDecision d;
  d.fire = completed_epochs >= SwitchEpoch();
  d.reason =
      absl::StrFormat("at_fraction rule: %d of %d epochs done, switch at epoch %d (alpha %.3g)",
                      completed_epochs, total_epochs_, SwitchEpoch(), fraction_);
  return d;
}

}  // namespace strata
