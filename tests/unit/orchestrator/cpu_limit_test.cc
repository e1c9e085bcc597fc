// The CPU quota a straggler gets, written into a stand-in cgroup directory (plain files): the
// period and quota values, including shares under a tenth of a core, whose 10 ms period would
// give a quota under the kernel's 1 ms minimum.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "orchestrator/launch/cpu_limit.h"

namespace strata {
namespace {

std::string ReadValue(const std::string& path) {
  std::ifstream in(path);
  std::string v;
  in >> v;
  return v;
}

TEST(CpuLimitTest, AShareUnderATenthOfACoreGetsAPeriodWhoseQuotaTheKernelTakes) {
  const std::string root = ::testing::TempDir() + "/cpu-limit-" + std::to_string(::getpid());
  std::filesystem::create_directories(root);
  struct Case {
    double fraction;
    const char* period;
    const char* quota;
  } cases[] = {{0.3, "10000", "3000"},
               {0.1, "10000", "1000"},
               {0.075, "13334", "1000"},    // 0.3 of a core, 4x slower
               {0.3 / 9, "30000", "1000"},  // 9x slower
               {2, "10000", "20000"}};
  for (const Case& c : cases) {
    const std::string name = "w" + std::to_string(c.fraction);
    auto limit = CpuLimit::Apply(::getpid(), c.fraction, name, root);
    ASSERT_TRUE(limit.ok()) << limit.status();
    EXPECT_EQ(ReadValue((*limit)->path() + "/cpu.cfs_period_us"), c.period) << c.fraction;
    EXPECT_EQ(ReadValue((*limit)->path() + "/cpu.cfs_quota_us"), c.quota) << c.fraction;
    std::filesystem::remove_all((*limit)->path());  // plain files, unlike a real cgroup
  }
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace strata
