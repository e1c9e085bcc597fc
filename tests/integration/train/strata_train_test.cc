// Runs the real strata-train binary on the real Fashion-MNIST files (Debian's
// dataset-fashion-mnist package), as a user would.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "services/common/base/metrics.h"

namespace {

namespace fs = std::filesystem;

struct Result {
  int exit_code;
  std::string output;
};

Result RunStrataTrain(const std::string& args) {
  const std::string cmd = std::string(STRATA_BIN_DIR) + "/strata-train " + args + " 2>&1";
  Result r{-1, ""};
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class StrataTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("strata-train-test-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(StrataTrain, MlpReaches84PercentOnFashionMnistInTwoEpochs) {
  const std::string config = std::string(STRATA_SOURCE_DIR) + "/configs/fmnist-mlp.yaml";
  // One thread: ctest runs tests side by side, and oversubscribed OpenMP threads crawl.
  Result r = RunStrataTrain("--config " + config + " --threads 1 --out " + (dir_ / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto metrics = strata::ReadJsonLines((dir_ / "out/metrics.jsonl").string());
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  ASSERT_EQ(metrics->size(), 2u);
  for (const auto& m : *metrics) {
    for (const char* key : {"epoch", "train_loss", "val_loss", "val_acc", "wall_s"}) {
      EXPECT_TRUE(m.contains(key)) << key << " missing in " << m.dump();
    }
  }
  EXPECT_EQ(metrics->back()["epoch"], 2);
  EXPECT_GE(metrics->back()["val_acc"].get<double>(), 0.84) << r.output;
  EXPECT_LT(metrics->back()["train_loss"].get<double>(), metrics->front()["train_loss"].get<double>());
  std::ifstream summary(dir_ / "out/summary.json");
  EXPECT_GE(nlohmann::json::parse(summary)["final_val_acc"].get<double>(), 0.84);
  EXPECT_TRUE(fs::exists(dir_ / "out/job.yaml"));
  EXPECT_NE(r.output.find("epoch  2/2"), std::string::npos) << r.output;
}

TEST_F(StrataTrain, MalformedSpecIsRefusedWithKeyAndLineAndWritesNothing) {
  std::ofstream(dir_ / "bad.yaml") << "name: bad\ntraining:\n  epochs: 2\n  lr: quick\n";
  Result r = RunStrataTrain("--config " + (dir_ / "bad.yaml").string() + " --out " + (dir_ / "out").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("bad.yaml:4: training.lr: expected a number, got 'quick'"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "out"));
}

TEST_F(StrataTrain, MissingDataFilesAreNamed) {
  std::ofstream(dir_ / "nodata.yaml") << "dataset: { name: mnist, path: " << (dir_ / "none").string() << " }\n";
  Result r = RunStrataTrain("--config " + (dir_ / "nodata.yaml").string() + " --out " + (dir_ / "out").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("missing data file"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("train-images-idx3-ubyte"), std::string::npos) << r.output;
}

TEST_F(StrataTrain, SmallResnetRunOnCifarShapedSyntheticIsRefusedClearly) {
  // Synthetic data is 1x1xD: only the MLP fits it; the error says so instead of crashing.
  std::ofstream(dir_ / "syn.yaml") << "dataset: { name: synthetic }\nmodel: { arch: resnet20 }\n";
  Result r = RunStrataTrain("--config " + (dir_ / "syn.yaml").string() + " --out " + (dir_ / "out").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("use mlp"), std::string::npos) << r.output;
}

}  // namespace
