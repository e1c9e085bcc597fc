// The first failure of a run and the process it names: what ends the run, and what the record's
// `run_failed` event and summary.json say. The launcher (a child that dies before it is ready),
// the run's controllers and the driver all report into the one RunFailure of a run, so it sits
// below them all.
#pragma once

#include <string>

#include <absl/status/status.h>

namespace strata {

// The first failure wins: later failures are consequences and do not replace it. The process is
// "worker-1", "ps-0", ..., or empty when the failure is not one process's fault.
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
