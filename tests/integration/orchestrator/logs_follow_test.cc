// `strata logs RUN SERVICE --follow` against a real run that is going: it prints the service's log
// as the service writes it and ends by itself when the run ends, having printed all of it, so a
// person (or a script piping it) never has to stop it by hand or misses the end.
#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include "tests/integration/orchestrator/cli_test_util.h"

namespace strata::testing {
namespace {

using std::chrono::seconds;

TEST(LogsFollow, PrintsAWorkersLogAsItGrowsAndEndsWithTheRun) {
  // SmallLongJob's 60 passes: the follow starts well before the end.
  RunFixture run(SmallLongJob("follow", "{ kind: allreduce }", ""));
  ASSERT_TRUE(run.WaitForTraining(1)) << run.run->Output();
  ASSERT_EQ(ReadJson(run.run_dir + "/status.json").value("state", ""), "running");
  const std::string at_start = Slurp(run.run_dir + "/logs/worker-0.log");

  BackgroundRun follow({"logs", run.run_dir, "worker-0", "--follow"}, run.dir + "/follow.txt");
  ASSERT_EQ(run.run->Wait(seconds(600)), 0) << run.run->Output();
  // Ends on its own once the run has: a follow that never looked at the run's state would be
  // killed here at the deadline and return -1.
  ASSERT_EQ(follow.Wait(seconds(120)), 0) << follow.Output();

  const std::string whole = Slurp(run.run_dir + "/logs/worker-0.log");
  // The log grew after the follow began (the worker's end of training is written last), and the
  // follow printed every byte of it, the part written before it began included. Seen to fail
  // with the follow printing only what was there when it started (a plain `strata logs`).
  EXPECT_GT(whole.size(), at_start.size());
  EXPECT_EQ(follow.Output(), whole);
}

}  // namespace
}  // namespace strata::testing
