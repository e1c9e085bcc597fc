#include "services/common/wire/checkpoint.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "services/common/base/files.h"

namespace strata {
namespace {

std::string TempDir() {
  auto dir = std::filesystem::temp_directory_path() /
             ("strata-ckpt-" + std::to_string(::getpid()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::create_directories(dir);
  return dir.string();
}

Checkpoint Sample() {
  Checkpoint c;
  c.epoch = 3;
  c.step = 1234;
  c.version = 77;
  c.extra = {{"arch", "mlp"}};
  CheckpointEntry w{TensorKind::kParameter, NamedTensor::Zeros({"fc.weight", {2, 3}, DType::kFloat32})};
  for (int i = 0; i < 6; ++i) w.tensor.floats()[i] = 0.5f * i;
  CheckpointEntry m{TensorKind::kMomentum, NamedTensor::Zeros({"fc.weight", {2, 3}, DType::kFloat32})};
  m.tensor.floats()[4] = -2.0f;
  CheckpointEntry b{TensorKind::kBuffer, NamedTensor::Zeros({"bn.running_var", {3}, DType::kFloat32})};
  c.entries = {w, m, b};
  return c;
}

TEST(Checkpoint, RoundTrip) {
  const std::string path = TempDir() + "/model.ckpt";
  ASSERT_TRUE(WriteCheckpoint(path, Sample()).ok());
  auto back = ReadCheckpoint(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->epoch, 3);
  EXPECT_EQ(back->step, 1234);
  EXPECT_EQ(back->version, 77);
  EXPECT_EQ(back->extra["arch"], "mlp");
  ASSERT_EQ(back->entries.size(), 3u);
  const CheckpointEntry* w = back->Find(TensorKind::kParameter, "fc.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->tensor.floats()[5], 2.5f);
  EXPECT_EQ(back->Find(TensorKind::kMomentum, "fc.weight")->tensor.floats()[4], -2.0f);
  EXPECT_EQ(back->Find(TensorKind::kBuffer, "bn.running_var")->tensor.spec.shape, std::vector<int64_t>{3});
  // No temporary file is left beside it.
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

TEST(Checkpoint, DetectsTruncationAnywhere) {
  const std::string bytes = *SerializeCheckpoint(Sample());
  for (size_t keep : {size_t{0}, size_t{5}, size_t{12}, size_t{30}, bytes.size() / 2, bytes.size() - 1}) {
    auto parsed = ParseCheckpoint(bytes.substr(0, keep), "cut.ckpt");
    ASSERT_FALSE(parsed.ok()) << "kept " << keep;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(parsed.status().message().find("cut.ckpt"), std::string::npos);
  }
  auto parsed = ParseCheckpoint(bytes.substr(0, bytes.size() - 1), "cut.ckpt");
  EXPECT_NE(parsed.status().message().find("truncated"), std::string::npos) << parsed.status();
}

TEST(Checkpoint, DetectsCorruptionByChecksum) {
  std::string bytes = *SerializeCheckpoint(Sample());
  bytes[bytes.size() - 10] ^= 0x40;  // a bit in the tensor data
  auto parsed = ParseCheckpoint(bytes, "flip.ckpt");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("checksum"), std::string::npos);
}

TEST(Checkpoint, RefusesOtherFilesAndFutureVersions) {
  EXPECT_NE(ParseCheckpoint("hello world, not a checkpoint", "x").status().message().find("bad magic"),
            std::string::npos);
  std::string bytes = *SerializeCheckpoint(Sample());
  bytes[8] = 9;  // format version
  EXPECT_EQ(ParseCheckpoint(bytes, "x").status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(ReadCheckpoint("/nonexistent/dir/x.ckpt").status().code(), absl::StatusCode::kNotFound);
}

TEST(Checkpoint, RefusesTensorWhoseBytesDisagreeWithShape) {
  Checkpoint c = Sample();
  c.entries[0].tensor.data.pop_back();
  EXPECT_FALSE(SerializeCheckpoint(c).ok());
}

}  // namespace
}  // namespace strata
