// The fixture's contract as a GoogleTest sees it (tests/docker/docker_test_env.h): under ctest the
// variables are set, and either the daemon answers with the image in it, or the test skips with
// the fixture's reason (under CI=true it fails).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "docker_test_env.h"
#include "tests/support/ci.h"

namespace {

TEST(DockerFixture, DaemonHoldsTheTestImage) {
  const strata::testing::DockerTestEnv docker = strata::testing::GetDockerTestEnv();
  if (!docker.unavailable.empty()) STRATA_UNAVAILABLE(docker.unavailable);
  ASSERT_EQ(docker.host.rfind("unix:///", 0), 0u) << docker.host;
  const std::string command = "DOCKER_HOST='" + docker.host +
                              "' docker image inspect -f '{{.Config.User}}' '" + docker.image +
                              "' | grep -qx strata";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
}

}  // namespace
