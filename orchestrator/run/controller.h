// The pieces the run supervisor's single loop steps: each is a state machine that looks at the
// cluster (ClusterView), makes at most one transition per Step and never sleeps or loops itself.
// Time comes in as `now` from the supervisor's one clock.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include <absl/status/status.h>

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

// The first failure of a run and the process it names (empty: not one process's fault). Later
// failures are consequences and do not replace it.
class RunFailure {
 public:
  // Returns `status` so that a caller can `return failure.Fail(...)`.
  absl::Status Fail(const std::string& process, absl::Status status) {
    if (status_.ok()) process_ = process, status_ = status;
    return status;
  }
  bool failed() const { return !status_.ok(); }
  const std::string& process() const { return process_; }
  const absl::Status& status() const { return status_; }

 private:
  std::string process_;
  absl::Status status_;
};

}  // namespace strata
