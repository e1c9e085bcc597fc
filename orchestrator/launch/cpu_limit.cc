#include "orchestrator/launch/cpu_limit.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include <absl/strings/str_cat.h>

namespace strata {
namespace {

absl::Status WriteValue(const std::string& path, const std::string& value) {
  std::ofstream out(path);
  out << value;
  out.flush();
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", value, " to ", path));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuLimit>> CpuLimit::Apply(pid_t pid, double fraction,
                                                          const std::string& name,
                                                          const std::string& root) {
  if (!(fraction > 0 && fraction <= 64)) {
    return absl::InvalidArgumentError(absl::StrCat("cpu share ", fraction, " outside (0, 64]"));
  }
  const std::string path = absl::StrCat(root, "/", name);
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create cgroup ", path, ": ", std::strerror(errno)));
  }
  auto limit = std::unique_ptr<CpuLimit>(new CpuLimit(path));
  // A short period, so that a quota slows the process down evenly instead of letting it run at
  // full speed for part of each period and stopping it for the rest: with the kernel's default
  // 100 ms, a parameter server at half a core answered nobody for 50 ms at a time, and every
  // worker waiting on it ran at the same (throttled) pace whatever its own quota.
  // The kernel refuses a quota under 1 ms, so a share under a tenth of a core (a straggler 9x
  // slower than 0.3 of a core) gets the period that makes its quota 1 ms.
  constexpr double kShortPeriodUs = 10000, kMinQuotaUs = 1000;
  const int64_t period_us =
      static_cast<int64_t>(std::ceil(std::max(kShortPeriodUs, kMinQuotaUs / fraction)));
  const int64_t quota_us = static_cast<int64_t>(std::llround(fraction * period_us));
  absl::Status s = WriteValue(path + "/cpu.cfs_period_us", std::to_string(period_us));
  if (s.ok()) s = WriteValue(path + "/cpu.cfs_quota_us", std::to_string(quota_us));
  if (s.ok()) s = WriteValue(path + "/cgroup.procs", std::to_string(pid));
  if (!s.ok()) return s;  // the destructor removes the empty cgroup
  return limit;
}

CpuLimit::~CpuLimit() { ::rmdir(path_.c_str()); }

}  // namespace strata
