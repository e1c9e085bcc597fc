// A test fixture base with a temporary directory of its own (under ::testing::TempDir()): made
// before the fixture's members, removed with everything in it after they are gone (a base class
// is destroyed after the derived class's members), so that a run record or a report the fixture
// holds may still write into it on its way out, and no test leaves a directory behind.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace strata::testing {

class TempDirTest : public ::testing::Test {
 protected:
  explicit TempDirTest(const std::string& tag) {
    std::string dir_template = ::testing::TempDir() + "/" + tag + "-XXXXXX";
    const char* made = ::mkdtemp(dir_template.data());
    temp_dir_ = made != nullptr ? made : "";
  }
  ~TempDirTest() override {
    std::error_code ignored;
    if (!temp_dir_.empty()) std::filesystem::remove_all(temp_dir_, ignored);
  }
  const std::string& temp_dir() const { return temp_dir_; }

 private:
  std::string temp_dir_;
};

}  // namespace strata::testing
