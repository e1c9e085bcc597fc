// The shard index file (services/common/wire/shard_index.h) and the balance table of `strata shard
// --stats`: torch-free, so each test may run in its own process.
#include <unistd.h>

#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "orchestrator/plan/shard_stats.h"
#include "services/common/base/files.h"
#include "services/common/wire/shard_index.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

TEST(ShardIndex, RoundTripsThroughAFile) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("shard-index-" + std::to_string(::getpid()) + ".idx"))
                               .string();
  ASSERT_TRUE(WriteShardIndex(path, {9, 2, 5, 0}, 10).ok());
  auto indices = ReadShardIndex(path);
  ASSERT_TRUE(indices.ok()) << indices.status();
  EXPECT_EQ(*indices, (std::vector<int64_t>{0, 2, 5, 9}));  // stored ascending
  auto file = ReadFile(path);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->size(), 36u + 8u * 4u);
  std::filesystem::remove(path);
}

TEST(ShardIndex, EmptyShardIsValid) {
  auto bytes = EncodeShardIndex({}, 0);
  ASSERT_TRUE(bytes.ok());
  auto index = DecodeShardIndex(*bytes, "empty.idx");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_TRUE(index->indices.empty());
}

TEST(ShardIndex, EveryTruncationIsDetected) {
  auto bytes = EncodeShardIndex({1, 4, 7, 8, 100}, 101);
  ASSERT_TRUE(bytes.ok());
  for (size_t length = 0; length < bytes->size(); ++length) {
    auto index = DecodeShardIndex(bytes->substr(0, length), "shard-3.idx");
    ASSERT_FALSE(index.ok()) << "length " << length;
    EXPECT_EQ(index.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(index.status().message()), HasSubstr("shard-3.idx"));
  }
  auto longer = DecodeShardIndex(*bytes + "x", "shard-3.idx");
  EXPECT_FALSE(longer.ok());
}

TEST(ShardIndex, EveryFlippedBitIsDetected) {
  auto bytes = EncodeShardIndex({1, 4, 7}, 10);
  ASSERT_TRUE(bytes.ok());
  for (size_t byte = 0; byte < bytes->size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string corrupt = *bytes;
      corrupt[byte] = static_cast<char>(corrupt[byte] ^ (1 << bit));
      EXPECT_FALSE(DecodeShardIndex(corrupt, "x.idx").ok()) << "byte " << byte << " bit " << bit;
    }
  }
}

TEST(ShardIndex, ClearErrorsForWrongFiles) {
  auto missing = ReadShardIndex("/nonexistent/shard-0.idx");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  auto not_index = DecodeShardIndex(std::string(64, 'a'), "manifest.json");
  ASSERT_FALSE(not_index.ok());
  EXPECT_THAT(std::string(not_index.status().message()), HasSubstr("not a shard index file"));
}

TEST(ShardIndex, EncoderRefusesIndicesTheReaderWouldReject) {
  EXPECT_FALSE(EncodeShardIndex({1, 1}, 10).ok());
  EXPECT_FALSE(EncodeShardIndex({10}, 10).ok());
  EXPECT_FALSE(EncodeShardIndex({-1}, 10).ok());
}

constexpr char kManifest[] = R"({
  "format": "strata-shard-plan", "version": 1, "method": "random", "seed": 1,
  "dataset": {"name": "toy"}, "examples": 12, "class_counts": [6, 6],
  "shards": [{"worker": 0, "count": 6, "class_counts": [5, 1]},
             {"worker": 1, "count": 6, "class_counts": [1, 5]}]
})";

TEST(ShardStats, LargestDeviationFromTheIdealShare) {
  auto b = shard::ComputeShardBalance(kManifest, "m.json");
  ASSERT_TRUE(b.ok()) << b.status();
  // Ideal: 3 of each class per shard; worker 0 has 5 of class 0.
  EXPECT_DOUBLE_EQ(b->overall_max, 2.0);
  EXPECT_EQ(b->overall_worker, 0);
  EXPECT_EQ(b->overall_class, 0);
  EXPECT_DOUBLE_EQ(b->class_max[1], -2.0);
  const std::string table = shard::FormatShardBalance(*b);
  EXPECT_THAT(table,
              HasSubstr("overall largest deviation: +2.0 examples (+66.67% of the ideal share)"));
}

TEST(ShardStats, RejectsWhatIsNotAManifest) {
  auto b = shard::ComputeShardBalance("{\"format\": \"other\"}", "m.json");
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("not a strata shard plan"));
  EXPECT_FALSE(shard::ComputeShardBalance("{", "m.json").ok());
  auto missing = shard::ShardStats("/nonexistent-plan");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("/nonexistent-plan/manifest.json"));
}

}  // namespace
}  // namespace strata
