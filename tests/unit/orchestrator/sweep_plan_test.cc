// The runs of a sweep, what a second invocation does with each run directory it finds, and the
// progress line's estimate.
#include "orchestrator/sweep/sweep_plan.h"

#include <gtest/gtest.h>

namespace strata::sweep {
namespace {

SweepSpec TwoByTwo() {
  auto spec =
      ParseSweepSpec("base: job.yaml\ngrid: {strategy.kind: [allreduce, ps]}\nseeds: [1, 2]\n",
                     "sweep.yaml", {.cores = 2});
  EXPECT_TRUE(spec.ok());
  return *spec;
}

TEST(SweepPlan, EveryCellWithEverySeedAlternatingCells) {
  const std::vector<PlannedRun> runs = PlanRuns(TwoByTwo(), "out");
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_EQ(runs[0].name, "kind=allreduce/seed-1");
  EXPECT_EQ(runs[0].dir, "out/runs/kind=allreduce/seed-1");
  EXPECT_EQ(runs[1].name, "kind=ps/seed-1");
  EXPECT_EQ(runs[2].name, "kind=allreduce/seed-2");
  EXPECT_EQ(runs[3].dir, "out/runs/kind=ps/seed-2");
  EXPECT_EQ(runs[3].cell, 1u);
  EXPECT_EQ(runs[3].seed, 2u);
  EXPECT_EQ(runs[3].assignments, (std::vector<std::string>{"strategy.kind=ps", "training.seed=2"}));
}

class Resume : public ::testing::Test {
 protected:
  Resume() : run_(PlanRuns(TwoByTwo(), "out")[1]) {}
  nlohmann::json Planned() const { return RunRecordJson(run_, "job.yaml", 42, true); }
  RunDirState Found(bool complete, std::optional<std::string> state) const {
    return {true, RunRecordJson(run_, "job.yaml", 42, complete), std::move(state)};
  }
  PlannedRun run_;
};

TEST_F(Resume, NothingThereRuns) {
  EXPECT_EQ(DecideResume(RunDirState{}, Planned()).action, ResumeAction::kRun);
}

TEST_F(Resume, AFinishedRunIsKept) {
  const ResumeDecision d = DecideResume(Found(true, "succeeded"), Planned());
  EXPECT_EQ(d.action, ResumeAction::kSkip);
}

TEST_F(Resume, AnInterruptedRunRunsAgainFromScratch) {
  // The sweep was stopped while the run went: its record never became complete.
  ResumeDecision d = DecideResume(Found(false, "interrupted"), Planned());
  EXPECT_EQ(d.action, ResumeAction::kRerun);
  EXPECT_NE(d.reason.find("interrupted"), std::string::npos) << d.reason;
  // Killed before summary.json said anything but "running".
  d = DecideResume(Found(false, "running"), Planned());
  EXPECT_EQ(d.action, ResumeAction::kRerun);
  EXPECT_NE(d.reason.find("interrupted"), std::string::npos) << d.reason;
  EXPECT_EQ(DecideResume(Found(false, std::nullopt), Planned()).action, ResumeAction::kRerun);
  // Even a succeeded summary does not count until the sweep marked the run complete.
  EXPECT_EQ(DecideResume(Found(false, "succeeded"), Planned()).action, ResumeAction::kRerun);
}

TEST_F(Resume, AFailedRunRunsAgain) {
  EXPECT_EQ(DecideResume(Found(false, "failed"), Planned()).action, ResumeAction::kRerun);
}

TEST_F(Resume, OtherSettingsOrAnotherBaseRunAgain) {
  RunDirState found = Found(true, "succeeded");
  (*found.record)["assignments"] = {"strategy.kind=ps", "training.seed=3"};
  EXPECT_EQ(DecideResume(found, Planned()).action, ResumeAction::kRerun);
  found = Found(true, "succeeded");
  (*found.record)["base_fingerprint"] = "0000000000000001";
  EXPECT_EQ(DecideResume(found, Planned()).action, ResumeAction::kRerun);
  found = Found(true, "succeeded");
  found.record.reset();  // a directory the sweep did not make
  EXPECT_EQ(DecideResume(found, Planned()).action, ResumeAction::kRerun);
  // A record that says complete over a summary that is not succeeded: run again.
  EXPECT_EQ(DecideResume(Found(true, "failed"), Planned()).action, ResumeAction::kRerun);
}

TEST(SweepPlan, FingerprintIsFnv1a) {
  EXPECT_EQ(Fingerprint(""), 14695981039346656037ull);
  EXPECT_EQ(Fingerprint("a"), 0xaf63dc4c8601ec8cull);  // the FNV-1a 64 test vector
  EXPECT_NE(Fingerprint("epochs: 2"), Fingerprint("epochs: 3"));
}

TEST(SweepPlan, RemainingTimeFromTheMeanFinishedRun) {
  EXPECT_FALSE(EstimateRemainingSeconds({}, 3, {5}, 1).has_value());
  // Mean 10 s; 3 not started, one running for 4 s: 30 + 6.
  EXPECT_DOUBLE_EQ(*EstimateRemainingSeconds({8, 12}, 3, {4}, 1), 36);
  // A run already longer than the mean adds nothing; two at a time halve it.
  EXPECT_DOUBLE_EQ(*EstimateRemainingSeconds({10}, 2, {15, 5}, 2), 12.5);
  EXPECT_EQ(FormatDuration(65), "1:05");
  EXPECT_EQ(FormatDuration(3723), "1:02:03");
}

}  // namespace
}  // namespace strata::sweep
