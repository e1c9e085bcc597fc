// Slows a process down for real: a cgroup-v1 CPU quota (share of one core), the way
// cluster.stragglers asks for a straggler. Not `nice`: with autogroup on (as on the machines this
// was measured on), nice does nothing between processes of different sessions.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include <absl/status/statusor.h>

namespace strata {

class CpuLimit {
 public:
  // Creates <root>/<name> with a quota of `fraction` cores (0.25: a quarter of one core; 2: two
  // cores) and moves `pid` into it.
  // Fails (changing nothing) where the cgroup tree is not writable.
  static absl::StatusOr<std::unique_ptr<CpuLimit>> Apply(
      pid_t pid, double fraction, const std::string& name,
      const std::string& root = "/sys/fs/cgroup/cpu");
  ~CpuLimit();  // removes the cgroup (it must be empty: call after the process ended)
  CpuLimit(const CpuLimit&) = delete;
  CpuLimit& operator=(const CpuLimit&) = delete;
  const std::string& path() const { return path_; }

 private:
  explicit CpuLimit(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace strata
