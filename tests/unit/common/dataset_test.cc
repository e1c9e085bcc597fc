#include "services/common/ml/dataset.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <zlib.h>

#include "services/common/config/job_keys.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

class DatasetFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata-data-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string Idx(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
    std::string s = {0, 0, 8, static_cast<char>(dims.size())};
    for (uint32_t d : dims) {
      for (int shift : {24, 16, 8, 0}) s.push_back(static_cast<char>((d >> shift) & 0xff));
    }
    s.append(data.begin(), data.end());
    return s;
  }
  void WritePlain(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
  }
  void WriteGz(const std::string& name, const std::string& bytes) {
    gzFile f = gzopen((dir_ / name).c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  }
  // A 4-train / 2-test MNIST-format data set of 2x3 images.
  void WriteMnistLike(bool gz) {
    std::vector<uint8_t> train_px(4 * 6), test_px(2 * 6);
    for (size_t i = 0; i < train_px.size(); ++i) train_px[i] = static_cast<uint8_t>(i * 10);
    for (size_t i = 0; i < test_px.size(); ++i) test_px[i] = 255;
    auto write = [&](const std::string& n, const std::string& b) {
      gz ? WriteGz(n + ".gz", b) : WritePlain(n, b);
    };
    write("train-images-idx3-ubyte", Idx({4, 2, 3}, train_px));
    write("train-labels-idx1-ubyte", Idx({4}, {3, 1, 4, 1}));
    write("t10k-images-idx3-ubyte", Idx({2, 2, 3}, test_px));
    write("t10k-labels-idx1-ubyte", Idx({2}, {9, 0}));
  }
  DatasetOptions Options(const std::string& name) {
    DatasetOptions o;
    o.name = EnumFromSpelling<v1::DatasetName>(name).value_or(static_cast<v1::DatasetName>(99));
    o.path = dir_.string();
    return o;
  }
  fs::path dir_;
};

TEST_F(DatasetFiles, ReadsGzippedAndPlainIdx) {
  for (bool gz : {true, false}) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    WriteMnistLike(gz);
    auto d = LoadDataset(Options("fashion-mnist"));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->channels, 1);
    EXPECT_EQ(d->height, 2);
    EXPECT_EQ(d->width, 3);
    EXPECT_EQ(d->num_classes, 10);
    ASSERT_EQ(d->train.size(), 4u);
    EXPECT_EQ(d->train.labels, (std::vector<int32_t>{3, 1, 4, 1}));
    EXPECT_FLOAT_EQ(d->train.features[1], 10.0f / 255.0f);
    EXPECT_FLOAT_EQ(d->test.features[0], 1.0f);
    EXPECT_EQ(d->test.labels[0], 9);
  }
}

TEST_F(DatasetFiles, LimitsSplits) {
  WriteMnistLike(true);
  DatasetOptions o = Options("mnist");
  o.max_train = 3;
  o.max_test = 1;
  auto d = LoadDataset(o);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->train.size(), 3u);
  EXPECT_EQ(d->train.features.size(), 18u);
  EXPECT_EQ(d->test.size(), 1u);
}

TEST_F(DatasetFiles, RefusesTruncatedIdx) {
  WriteMnistLike(true);
  std::vector<uint8_t> px(4 * 6 - 5, 1);  // five pixels short
  WriteGz("train-images-idx3-ubyte.gz", Idx({4, 2, 3}, px));
  auto d = LoadDataset(Options("fashion-mnist"));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(d.status().message().find("truncated"), std::string::npos) << d.status();
  EXPECT_NE(d.status().message().find("train-images-idx3-ubyte.gz"), std::string::npos);
}

TEST_F(DatasetFiles, RefusesCorruptIdx) {
  WriteMnistLike(true);
  WriteGz("train-labels-idx1-ubyte.gz", "this is not an idx file");
  auto d = LoadDataset(Options("fashion-mnist"));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("not an IDX file"), std::string::npos) << d.status();

  WriteMnistLike(true);
  WriteGz("train-labels-idx1-ubyte.gz", Idx({3}, {1, 2, 3}));  // 3 labels for 4 images
  d = LoadDataset(Options("fashion-mnist"));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("3 labels for 4 images"), std::string::npos) << d.status();

  WriteMnistLike(true);
  WriteGz("train-labels-idx1-ubyte.gz", Idx({4}, {1, 2, 3, 12}));  // label out of range
  EXPECT_FALSE(LoadDataset(Options("fashion-mnist")).ok());

  WriteMnistLike(true);
  // Garbage that claims to be gzip: zlib reports an error rather than data.
  WritePlain("t10k-images-idx3-ubyte.gz", std::string("\x1f\x8b\x08\x00garbage-garbage", 19));
  EXPECT_FALSE(LoadDataset(Options("fashion-mnist")).ok());
}

TEST_F(DatasetFiles, MissingFilesAndUnknownNames) {
  auto d = LoadDataset(Options("fashion-mnist"));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find("train-images-idx3-ubyte"), std::string::npos);
  auto u = LoadDataset(Options("imagenet"));
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.status().message().find("unknown data set 99"), std::string::npos);
}

std::string CifarRecords(int label_bytes, const std::vector<std::vector<uint8_t>>& labels) {
  std::string s;
  for (const auto& l : labels) {
    s.append(l.begin(), l.end());
    s.append(3072, static_cast<char>(l.back()));
  }
  (void)label_bytes;
  return s;
}

TEST_F(DatasetFiles, ReadsCifar10) {
  for (int i = 1; i <= 5; ++i)
    WritePlain("data_batch_" + std::to_string(i) + ".bin",
               CifarRecords(1, {{static_cast<uint8_t>(i)}, {0}}));
  WritePlain("test_batch.bin", CifarRecords(1, {{7}}));
  auto d = LoadDataset(Options("cifar10"));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->channels, 3);
  EXPECT_EQ(d->height, 32);
  EXPECT_TRUE(d->augment);
  EXPECT_EQ(d->train.size(), 10u);
  EXPECT_EQ(d->train.labels[2], 2);
  EXPECT_EQ(d->test.labels[0], 7);
  EXPECT_FLOAT_EQ(d->test.features[3071], 7.0f / 255.0f);
}

TEST_F(DatasetFiles, ReadsCifar100FineAndCoarse) {
  fs::create_directories(dir_ / "cifar-100-binary");
  WritePlain("cifar-100-binary/train.bin", CifarRecords(2, {{4, 42}, {19, 99}}));
  WritePlain("cifar-100-binary/test.bin", CifarRecords(2, {{0, 1}}));
  DatasetOptions o = Options("cifar100");
  auto fine = LoadDataset(o);
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ(fine->num_classes, 100);
  EXPECT_EQ(fine->train.labels, (std::vector<int32_t>{42, 99}));
  o.label_set = v1::LABEL_SET_COARSE;
  auto coarse = LoadDataset(o);
  ASSERT_TRUE(coarse.ok());
  EXPECT_EQ(coarse->num_classes, 20);
  EXPECT_EQ(coarse->train.labels, (std::vector<int32_t>{4, 19}));
}

TEST_F(DatasetFiles, RefusesTruncatedCifar) {
  for (int i = 1; i <= 5; ++i)
    WritePlain("data_batch_" + std::to_string(i) + ".bin", CifarRecords(1, {{1}}));
  WritePlain("test_batch.bin", CifarRecords(1, {{1}}).substr(0, 3000));
  auto d = LoadDataset(Options("cifar10"));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("test_batch.bin"), std::string::npos) << d.status();
  EXPECT_NE(d.status().message().find("truncated"), std::string::npos);
}

TEST(SyntheticDataset, DeterministicWithHiddenClusters) {
  DatasetOptions o;
  o.name = v1::DATASET_SYNTHETIC;
  o.synthetic_train = 500;
  o.synthetic_test = 100;
  auto a = LoadDataset(o);
  auto b = LoadDataset(o);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->train.features, b->train.features);
  EXPECT_EQ(a->num_classes, 4);
  EXPECT_EQ(a->example_floats(), 32u);
  for (size_t i = 0; i < a->train.size(); ++i) {
    EXPECT_EQ(a->train.labels[i], a->train.hidden_clusters[i] / o.synthetic_subclusters);
  }
  o.seed = 2;
  EXPECT_NE(LoadDataset(o)->train.features, a->train.features);
}

}  // namespace
}  // namespace strata
