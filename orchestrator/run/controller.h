// The pieces the run supervisor's single loop steps: each is a state machine that looks at the
// cluster (ClusterView), makes at most one transition per Step and never sleeps or loops itself.
// Time comes in as `now` from the supervisor's one clock.
#pragma once

#include <chrono>
#include <optional>

#include <absl/status/status.h>

#include "orchestrator/record/run_failure.h"
#include "orchestrator/run/cluster_view.h"

namespace strata {

using Clock = std::chrono::steady_clock;

class Controller {
 public:
  virtual ~Controller() = default;
  virtual absl::Status Step(const ClusterView& view, Clock::time_point now) = 0;
  // How soon this controller needs its next Step; nullopt: the loop's own period will do.
  virtual std::optional<Clock::duration> StepWithin() const { return std::nullopt; }
};

}  // namespace strata
