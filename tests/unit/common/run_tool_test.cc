// RunTool (services/common/process/run_tool.h): real tools (/bin/sh) run to their end, their
// output read back, and killed with their process group at the deadline.
#include "services/common/process/run_tool.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace strata {
namespace {

class RunToolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "run_tool_test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  ToolRunOptions Shell(const std::string& script) const {
    ToolRunOptions o;
    o.name = "sh";
    o.argv = {"/bin/sh", "-c", script};
    o.output_path = dir_ + "/output";
    o.timeout = std::chrono::seconds(60);
    return o;
  }

  std::string dir_;
};

TEST_F(RunToolTest, CapturesTheOutputAndTheExitCode) {
  auto run = RunTool(Shell("echo out; echo err >&2; exit 3"));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(run->finished);
  EXPECT_EQ(run->exit_code, 3);
  EXPECT_EQ(run->exit_description, "exited with code 3");
  EXPECT_FALSE(run->ok());
  EXPECT_EQ(run->output, "out\nerr\n");
  EXPECT_EQ(run->errors, "");
}

TEST_F(RunToolTest, KeepsStderrApartWhenAsked) {
  ToolRunOptions o = Shell("echo '{}'; echo warning >&2");
  o.errors_path = dir_ + "/errors";
  std::ofstream(o.errors_path) << "left from an earlier call\n";
  auto run = RunTool(o);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(run->ok());
  EXPECT_EQ(run->output, "{}\n");
  EXPECT_EQ(run->errors, "warning\n");
}

// With RunTool broken so that it waited without a deadline, this test took 60 s and saw
// run->finished true and exit code 0.
TEST_F(RunToolTest, KillsTheWholeProcessGroupAtTheDeadline) {
  const std::string pid_file = dir_ + "/sleeper.pid";
  ToolRunOptions o = Shell("sleep 60 & echo $! > " + pid_file + "; wait");
  o.timeout = std::chrono::seconds(5);
  auto run = RunTool(o);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_FALSE(run->finished);
  EXPECT_EQ(run->exit_code, -1);
  EXPECT_FALSE(run->ok());
  // The tool's own child went with it: it was in the tool's process group.
  pid_t sleeper = 0;
  std::ifstream(pid_file) >> sleeper;
  ASSERT_GT(sleeper, 0) << "the shell did not start its child within the deadline";
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  auto gone = [&] {
    std::ifstream stat("/proc/" + std::to_string(sleeper) + "/stat");
    std::string pid, comm, state;
    return !(stat >> pid >> comm >> state) || state == "Z";  // reaped, or dead and not yet
  };
  while (!gone() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling /proc, no event
  }
  EXPECT_TRUE(gone()) << "sleep " << sleeper << " outlived its tool";
}

TEST_F(RunToolTest, FailsOnlyWhenTheToolCannotStart) {
  ToolRunOptions o = Shell("");
  o.argv = {dir_ + "/no-such-tool"};
  auto run = RunTool(o);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kNotFound) << run.status();
}

}  // namespace
}  // namespace strata
