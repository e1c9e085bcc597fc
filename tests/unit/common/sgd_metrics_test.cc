#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "services/common/base/metrics.h"
#include "services/common/ml/sgd.h"

namespace strata {
namespace {

TEST(Sgd, MatchesTheTorchFormula) {
  std::vector<float> p = {1.0f, -2.0f}, g = {0.5f, 0.25f}, v = {0, 0};
  const SgdOptions o{0.1f, 0.9f, 0.01f};
  SgdStep(p.data(), g.data(), v.data(), 2, o);
  // First step: v = g + wd * p
  EXPECT_FLOAT_EQ(v[0], 0.5f + 0.01f * 1.0f);
  EXPECT_FLOAT_EQ(p[0], 1.0f - 0.1f * 0.51f);
  const float p1 = p[1], v1 = v[1];
  SgdStep(p.data(), g.data(), v.data(), 2, o);
  EXPECT_FLOAT_EQ(v[1], 0.9f * v1 + (0.25f + 0.01f * p1));
}

TEST(Sgd, StepSchedule) {
  LrScheduleSpec s{{10, 20}, 0.1};
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, s, 0), 1.0);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, s, 9.99), 1.0);
  EXPECT_NEAR(ScheduledLearningRate(1.0, s, 10), 0.1, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(1.0, s, 25), 0.01, 1e-12);
}

TEST(JsonLines, WritesAndReadsBackSkippingATornTail) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("strata-jsonl-" + std::to_string(::getpid()) + ".jsonl")).string();
  std::remove(path.c_str());
  {
    auto w = JsonLinesWriter::Open(path);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Write({{"epoch", 1}, {"val_acc", 0.5}}).ok());
    ASSERT_TRUE((*w)->Write({{"epoch", 2}, {"val_acc", 0.6}}).ok());
  }
  std::ofstream(path, std::ios::app) << "{\"epoch\": 3, \"val";  // a writer mid-line
  auto records = ReadJsonLines(path);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 2u);
  EXPECT_EQ((*records)[1]["epoch"], 2);
  std::remove(path.c_str());
  EXPECT_FALSE(JsonLinesWriter::Open("/nonexistent-dir/x.jsonl").ok());
}

}  // namespace
}  // namespace strata
