#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <vector>

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

TEST(Sgd, MaxAbsFindsTheLargestMagnitudeAndAnyNonFiniteValue) {
  std::vector<float> values(1000, 0.25f);
  EXPECT_EQ(MaxAbsOrInfinity(values.data(), 0), 0.0f);
  EXPECT_EQ(MaxAbsOrInfinity(values.data(), values.size()), 0.25f);
  values[617] = -3.5f;  // a negative magnitude, away from the vector lanes' edges
  values[998] = 1e-30f;
  EXPECT_EQ(MaxAbsOrInfinity(values.data(), values.size()), 3.5f);
  values[999] = -std::numeric_limits<float>::infinity();  // in the scalar tail
  EXPECT_TRUE(std::isinf(MaxAbsOrInfinity(values.data(), values.size())));
  values[999] = 0;
  values[3] = std::nanf("");
  EXPECT_TRUE(std::isinf(MaxAbsOrInfinity(values.data(), values.size())));
  values[3] = std::numeric_limits<float>::max();
  EXPECT_EQ(MaxAbsOrInfinity(values.data(), values.size()), std::numeric_limits<float>::max());
}

// The parameter server steps in place only where this proves the step finite: the bounds must
// hold for the worst signs and grow as the step's arithmetic does, and stop short of FLT_MAX.
TEST(Sgd, TheOverflowBoundHoldsForTheWorstCaseAndRefusesNearTheLimit) {
  const SgdOptions o{0.5f, 0.9f, 0.01f};
  double p = 2.0, v = 3.0;
  ASSERT_TRUE(SgdStepCannotOverflow(o, /*g_bound=*/4.0, &p, &v));
  EXPECT_NEAR(v, 0.9 * 3.0 + 4.0 + 0.01 * 2.0, 1e-6);  // the options are floats
  EXPECT_NEAR(p, 2.0 + 0.5 * v, 1e-6);
  std::vector<float> pw = {2.0f, -2.0f}, g = {4.0f, -4.0f}, vw = {3.0f, -3.0f};
  SgdStep(pw.data(), g.data(), vw.data(), 2, o);
  for (int i = 0; i < 2; ++i) {
    EXPECT_LE(std::fabs(vw[i]), v);
    EXPECT_LE(std::fabs(pw[i]), p);
  }
  const double big = std::numeric_limits<float>::max() / 2.0;
  double p2 = 1, v2 = 1;
  EXPECT_FALSE(SgdStepCannotOverflow(o, big, &p2, &v2)) << "a gradient near FLT_MAX";
  EXPECT_EQ(p2, 1) << "bounds are left alone when refused";
  double p3 = big, v3 = 0;
  EXPECT_FALSE(SgdStepCannotOverflow(o, 1.0, &p3, &v3)) << "weights near FLT_MAX";
  double p4 = 1, v4 = 1;
  EXPECT_FALSE(SgdStepCannotOverflow(o, std::numeric_limits<double>::infinity(), &p4, &v4))
      << "an unknown bound";
  EXPECT_FALSE(SgdStepCannotOverflow(o, std::nan(""), &p4, &v4));
}

TEST(Sgd, StepSchedule) {
  const std::vector<int32_t> milestones = {10, 20};
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, milestones, 0.1, 0), 1.0);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(1.0, milestones, 0.1, 9.99), 1.0);
  EXPECT_NEAR(ScheduledLearningRate(1.0, milestones, 0.1, 10), 0.1, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(1.0, milestones, 0.1, 25), 0.01, 1e-12);
}

TEST(JsonLines, WritesAndReadsBackSkippingATornTail) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("strata-jsonl-" + std::to_string(::getpid()) + ".jsonl"))
                               .string();
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
