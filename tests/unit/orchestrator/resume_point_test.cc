// FindResumePoint on run directories made by hand: which phase a run resumes in, from which
// checkpoint and step, and the runs it refuses (finished, still running, saves missing or torn).
#include "orchestrator/run/resume_point.h"
#include "services/common/config/job_spec.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "services/common/base/files.h"
#include "services/common/wire/checkpoint.h"

namespace strata {
namespace {

class ResumePointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/resume-point-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    paths_ = std::make_unique<RunPaths>(dir_);
    ASSERT_TRUE(MakeDirs(paths_->checkpoints).ok());
    Write(paths_->job_yaml, "name: r\n");
    spec_ = DefaultJob();
    spec_.mutable_cluster()->set_workers(2);
    spec_.mutable_cluster()->set_parameter_servers(2);
    spec_.mutable_strategy()->set_kind(v1::STRATEGY_KIND_SWITCH);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static void Write(const std::string& path, const std::string& text) {
    ASSERT_TRUE(WriteFileAtomic(path, text).ok()) << path;
  }
  void SaveCheckpoint(const std::string& path, int64_t step) {
    Checkpoint c;
    c.step = step;
    c.version = step;
    ASSERT_TRUE(WriteCheckpoint(path, c).ok()) << path;
  }
  std::string ServerSave(int p) {
    return paths_->checkpoints + "/ps-" + std::to_string(p) + ".ckpt";
  }

  std::string dir_;
  std::unique_ptr<RunPaths> paths_;
  v1::ResolvedJob spec_;
};

TEST_F(ResumePointTest, ARingRunResumesFromWorkerZerosCheckpointWithTheRecordsClockAndEpochs) {
  SaveCheckpoint(dir_ + "/checkpoints/ring.ckpt", 1121);
  Write(paths_->status, R"({"state":"running","orchestrator_pid":0,"wall_s":8.5,
                           "workers":[{"step":1130},{"step":1131}]})");
  Write(paths_->events,
        "{\"event\":\"run_started\",\"wall_s\":0}\n"
        "{\"event\":\"launched\",\"wall_s\":9.25}\n");
  Write(paths_->metrics, "{\"epoch\":34,\"val_loss\":0.8}\n{\"epoch\":35,\"val_loss\":0.7}\n");
  auto point = FindResumePoint(*paths_, spec_);
  ASSERT_TRUE(point.ok()) << point.status();
  EXPECT_EQ(point->phase, "allreduce");
  EXPECT_EQ(point->step, 1121);  // the checkpoint's, not the workers' later count
  EXPECT_EQ(point->StepsByRank(2), (std::vector<int64_t>{1121, 1121}));
  EXPECT_EQ(point->checkpoint, dir_ + "/checkpoints/ring.ckpt");
  EXPECT_EQ(point->evaluated_epochs, 35);
  EXPECT_DOUBLE_EQ(point->wall_s, 9.25);
  EXPECT_EQ(point->earlier_resumes, 0);
  EXPECT_FALSE(point->switch_done.has_value());
}

TEST_F(ResumePointTest, WithoutARingCheckpointTheRunStartsAgainFromTheSeed) {
  auto point = FindResumePoint(*paths_, spec_);
  ASSERT_TRUE(point.ok()) << point.status();
  EXPECT_EQ(point->phase, "allreduce");
  EXPECT_TRUE(point->checkpoint.empty());
  EXPECT_EQ(point->StepsByRank(2), (std::vector<int64_t>{0, 0}));
}

TEST_F(ResumePointTest, AfterTheSwitchTheWorkersGoOnFromTheirOwnCountsAgainstTheServersSaves) {
  SaveCheckpoint(ServerSave(0), 900);
  SaveCheckpoint(ServerSave(1), 905);
  Write(paths_->status, R"({"state":"running","orchestrator_pid":0,
                           "workers":[{"step":1245},{"step":1260}]})");
  Write(paths_->events,
        "{\"event\":\"switch_done\",\"at_step\":384,\"epoch\":12.0,\"wall_s\":4}\n"
        "{\"event\":\"resumed\",\"wall_s\":6}\n");
  auto point = FindResumePoint(*paths_, spec_);
  ASSERT_TRUE(point.ok()) << point.status();
  EXPECT_EQ(point->phase, "ps");
  ASSERT_TRUE(point->switch_done.has_value());
  EXPECT_EQ(point->switch_done->at_step, 384);
  EXPECT_EQ(point->StepsByRank(2), (std::vector<int64_t>{1245, 1260}));
  EXPECT_EQ(point->earlier_resumes, 1);
}

TEST_F(ResumePointTest, AMissingServerSaveAfterTheSwitchIsNamed) {
  SaveCheckpoint(ServerSave(0), 900);
  Write(paths_->events, "{\"event\":\"switch_done\",\"at_step\":384}\n");
  auto point = FindResumePoint(*paths_, spec_);
  ASSERT_EQ(point.status().code(), absl::StatusCode::kFailedPrecondition) << point.status();
  EXPECT_NE(point.status().message().find("ps-1.ckpt is missing"), std::string::npos)
      << point.status();
}

TEST_F(ResumePointTest, AServerSaveOfAHandoverThatNeverCompletedIsListedForRemoval) {
  SaveCheckpoint(ServerSave(0), 384);
  auto point = FindResumePoint(*paths_, spec_);
  ASSERT_TRUE(point.ok()) << point.status();
  EXPECT_EQ(point->phase, "allreduce");
  EXPECT_EQ(point->stale_server_checkpoints, std::vector<std::string>{ServerSave(0)});
}

TEST_F(ResumePointTest, APsJobStoppedBeforeItsServersFirstSaveStartsAgainFromTheInitialModel) {
  spec_.mutable_strategy()->set_kind(v1::STRATEGY_KIND_PS);
  auto point = FindResumePoint(*paths_, spec_);
  ASSERT_TRUE(point.ok()) << point.status();
  EXPECT_EQ(point->phase, "ps");
}

TEST_F(ResumePointTest, ATornRingCheckpointIsDataLoss) {
  Write(dir_ + "/checkpoints/ring.ckpt", "STRATA-CKPT but not much else");
  auto point = FindResumePoint(*paths_, spec_);
  EXPECT_EQ(point.status().code(), absl::StatusCode::kDataLoss) << point.status();
}

TEST_F(ResumePointTest, AFinishedRunIsRefused) {
  Write(paths_->summary, R"({"state":"succeeded"})");
  auto point = FindResumePoint(*paths_, spec_);
  ASSERT_EQ(point.status().code(), absl::StatusCode::kFailedPrecondition) << point.status();
  EXPECT_NE(point.status().message().find("finished"), std::string::npos);
}

TEST_F(ResumePointTest, AnInterruptedOrFailedRunMayBeResumed) {
  Write(paths_->summary, R"({"state":"interrupted"})");
  EXPECT_TRUE(FindResumePoint(*paths_, spec_).ok());
}

TEST_F(ResumePointTest, ADirectoryWithoutJobYamlIsNotARun) {
  std::filesystem::remove(paths_->job_yaml);
  EXPECT_EQ(FindResumePoint(*paths_, spec_).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace strata
