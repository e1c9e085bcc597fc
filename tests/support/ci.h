// A test that needs a part of the machine (a tool, a daemon, a package, a privilege) and finds it
// missing says so in one line and skips; under CI=true, which .ci/run sets, it fails instead, so
// that CI cannot be green with a part of the suite left out. Use as the statement that ends the
// test:
//
//   if (!Have("kubectl")) STRATA_UNAVAILABLE("kubectl is not installed (scripts/install-deps.sh)");
#pragma once

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

namespace strata::testing {

inline bool InCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && (std::string(ci) == "true" || std::string(ci) == "1");
}

}  // namespace strata::testing

#define STRATA_UNAVAILABLE(why)                                                \
  do {                                                                         \
    if (::strata::testing::InCi()) {                                           \
      FAIL() << "CI=true, so this is a failure rather than a skip: " << (why); \
    }                                                                          \
    GTEST_SKIP() << (why);                                                     \
  } while (0)
