// For tests that need the suite's own Docker daemon: the `docker` CTest fixture
// (tests/docker/CMakeLists.txt) starts it and builds the image from this build's binaries, and
// `strata_require_docker(...)` gives a test the fixture and these variables. Use:
//
//   const strata::testing::DockerTestEnv docker = strata::testing::GetDockerTestEnv();
//   if (!docker.unavailable.empty()) STRATA_UNAVAILABLE(docker.unavailable);
//
// (tests/support/ci.h: a skip, and under CI=true a failure.)
//   ... run `docker` / `docker-compose` with DOCKER_HOST=docker.host, image docker.image ...
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace strata::testing {

struct DockerTestEnv {
  std::string host;         // DOCKER_HOST of the suite's daemon: unix:///...
  std::string image;        // the image built from this build's binaries (strata:test)
  std::string unavailable;  // non-empty: why there is no daemon here (the test skips; fails in CI)
};

inline DockerTestEnv GetDockerTestEnv() {
  DockerTestEnv env;
  const char* host = std::getenv("STRATA_TEST_DOCKER_HOST");
  const char* image = std::getenv("STRATA_TEST_IMAGE");
  const char* skip_file = std::getenv("STRATA_TEST_DOCKER_SKIP_FILE");
  if (host == nullptr || image == nullptr || skip_file == nullptr) {
    env.unavailable =
        "no Docker daemon for the tests: run through ctest, whose `docker` fixture starts one "
        "(STRATA_TEST_DOCKER_HOST, STRATA_TEST_IMAGE or STRATA_TEST_DOCKER_SKIP_FILE unset)";
    return env;
  }
  env.host = host;
  env.image = image;
  if (std::ifstream in(skip_file); in) {
    std::ostringstream reason;
    reason << in.rdbuf();
    std::string text = reason.str();
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    env.unavailable = "no Docker daemon for the tests: " + text;
  }
  return env;
}

}  // namespace strata::testing
