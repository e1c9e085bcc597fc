// Properties of the four sharding methods, the KMeans neighbourhoods and the plan directory.
// One executable for everything that links LibTorch (each process start loads ~336 libraries).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "orchestrator/plan/shard_stats.h"
#include "services/common/base/files.h"
#include "services/common/base/run_directory.h"
#include "services/common/config/job_keys.h"
#include "services/common/ml/dataset.h"
#include "services/common/wire/shard_index.h"
#include "sharder/clustering.h"
#include "sharder/plan_writer.h"
#include "sharder/shard_plan.h"

namespace strata::sharder {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

Dataset Synthetic(size_t n, int classes = 4, int subclusters = 3, int dim = 16, uint64_t seed = 7) {
  DatasetOptions o;
  o.name = v1::DATASET_SYNTHETIC;
  o.synthetic_train = n;
  o.synthetic_test = 10;
  o.synthetic_classes = classes;
  o.synthetic_subclusters = subclusters;
  o.synthetic_dim = dim;
  o.seed = seed;
  return MakeSyntheticDataset(o);
}

ShardPlan Plan(const Dataset& d, ShardPlanOptions o) {
  auto plan = MakeShardPlan(d.train, static_cast<int64_t>(d.example_floats()), d.num_classes, o);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *std::move(plan) : ShardPlan{};
}

ShardPlanOptions Options(const std::string& method, int workers, uint64_t seed = 1) {
  ShardPlanOptions o;
  o.method = *EnumFromSpelling<v1::ShardMethod>(method);
  o.workers = workers;
  o.seed = seed;
  o.clusters = 12;
  o.pca_components = 8;
  return o;
}

// How many shards each example appears in.
std::vector<int> Multiplicity(const ShardPlan& plan) {
  std::vector<int> seen(static_cast<size_t>(plan.examples), 0);
  for (const auto& shard : plan.shards) {
    for (int64_t e : shard) ++seen.at(static_cast<size_t>(e));
  }
  return seen;
}

void ExpectWithinOne(const std::vector<int64_t>& values, const std::string& what) {
  ASSERT_FALSE(values.empty());
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  EXPECT_LE(*hi - *lo, 1) << what;
}

class PartitionMethodTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(PartitionMethodTest, DisjointCoverEveryExampleOnceWithEqualSizes) {
  const auto& [method, workers] = GetParam();
  const Dataset d = Synthetic(1003);
  const ShardPlan plan = Plan(d, Options(method, workers));
  ASSERT_EQ(plan.shards.size(), static_cast<size_t>(workers));
  for (int count : Multiplicity(plan)) ASSERT_EQ(count, 1);
  std::vector<int64_t> sizes;
  for (const auto& s : plan.shards) {
    sizes.push_back(static_cast<int64_t>(s.size()));
    EXPECT_TRUE(std::is_sorted(s.begin(), s.end()));
  }
  ExpectWithinOne(sizes, "shard sizes");
  // Class counts in the manifest match the shards.
  for (int w = 0; w < workers; ++w) {
    std::vector<int64_t> counts(d.num_classes, 0);
    for (int64_t e : plan.shards[w]) ++counts[d.train.labels[e]];
    EXPECT_EQ(counts, plan.shard_class_counts[w]);
  }
}

INSTANTIATE_TEST_SUITE_P(Methods, PartitionMethodTest,
                         ::testing::Combine(::testing::Values("random", "mod", "stratified"),
                                            ::testing::Values(1, 3, 7, 12)));

TEST(ModShards, ExampleGoesToIndexModWorkers) {
  const ShardPlan plan = Plan(Synthetic(100), Options("mod", 7));
  for (int w = 0; w < 7; ++w) {
    for (int64_t e : plan.shards[w]) EXPECT_EQ(e % 7, w);
  }
}

TEST(StratifiedShards, PerClassCountsDifferByAtMostOne) {
  // Unequal class sizes (the synthetic mixture weights clusters 1..4), classes not divisible by n.
  const Dataset d = Synthetic(2011);
  for (int workers : {2, 5, 12}) {
    const ShardPlan plan = Plan(d, Options("stratified", workers));
    for (int c = 0; c < d.num_classes; ++c) {
      std::vector<int64_t> per_shard;
      for (int w = 0; w < workers; ++w) per_shard.push_back(plan.shard_class_counts[w][c]);
      ExpectWithinOne(per_shard, "class " + std::to_string(c) + " over " + std::to_string(workers));
    }
  }
}

TEST(StratifiedShards, RandomShardsAreLessBalancedOnTheSameData) {
  // The reason stratified exists: a seeded shuffle alone leaves class counts uneven.
  const Dataset d = Synthetic(2011);
  const ShardPlan plan = Plan(d, Options("random", 12));
  int64_t worst = 0;
  for (int c = 0; c < d.num_classes; ++c) {
    int64_t lo = INT64_MAX, hi = 0;
    for (int w = 0; w < 12; ++w) {
      lo = std::min(lo, plan.shard_class_counts[w][c]);
      hi = std::max(hi, plan.shard_class_counts[w][c]);
    }
    worst = std::max(worst, hi - lo);
  }
  EXPECT_GT(worst, 1);
}

TEST(ShardPlans, SameSeedSamePlanOtherSeedOtherPlan) {
  const Dataset d = Synthetic(900);
  for (const std::string method : {"random", "stratified", "distribution-aware"}) {
    const ShardPlan a = Plan(d, Options(method, 4, 1));
    const ShardPlan b = Plan(d, Options(method, 4, 1));
    const ShardPlan c = Plan(d, Options(method, 4, 2));
    EXPECT_EQ(a.shards, b.shards) << method;
    EXPECT_NE(a.shards, c.shards) << method;
  }
  // mod has no randomness: the seed does not matter.
  EXPECT_EQ(Plan(d, Options("mod", 4, 1)).shards, Plan(d, Options("mod", 4, 2)).shards);
}

TEST(DistributionAware, SparseClustersInEveryShardDenseOnesSplitEvenly) {
  // 600 examples over 24 neighbourhoods: about 25 each, so with 30 workers some neighbourhoods
  // are sparse (< 30 examples) and some dense.
  const Dataset d = Synthetic(600);
  ShardPlanOptions o = Options("distribution-aware", 30);
  o.clusters = 24;
  const ShardPlan plan = Plan(d, o);
  ASSERT_EQ(plan.clusters.size(), 24u);
  ASSERT_EQ(plan.cluster_of.size(), 600u);
  const std::vector<int> multiplicity = Multiplicity(plan);
  int sparse = 0, dense = 0;
  for (int c = 0; c < 24; ++c) {
    std::vector<int64_t> members;
    for (size_t i = 0; i < plan.cluster_of.size(); ++i) {
      if (plan.cluster_of[i] == c) members.push_back(static_cast<int64_t>(i));
    }
    EXPECT_EQ(plan.clusters[c].size, static_cast<int64_t>(members.size()));
    EXPECT_EQ(plan.clusters[c].broadcast, members.size() < 30u) << "cluster " << c;
    if (plan.clusters[c].broadcast) {
      ++sparse;
      for (const auto& shard : plan.shards) {
        for (int64_t e : members) {
          EXPECT_TRUE(std::binary_search(shard.begin(), shard.end(), e))
              << "sparse cluster " << c << " example " << e << " missing from a shard";
        }
      }
    } else {
      ++dense;
      std::vector<int64_t> per_shard;
      for (const auto& shard : plan.shards) {
        int64_t n = 0;
        for (int64_t e : members) n += std::binary_search(shard.begin(), shard.end(), e) ? 1 : 0;
        per_shard.push_back(n);
      }
      ExpectWithinOne(per_shard, "dense cluster " + std::to_string(c));
      for (int64_t e : members) EXPECT_EQ(multiplicity[e], 1) << "dense example in two shards";
    }
  }
  EXPECT_GT(sparse, 0) << "the test needs sparse clusters";
  EXPECT_GT(dense, 0) << "the test needs dense clusters";
  for (int m : multiplicity) EXPECT_GE(m, 1) << "an example is in no shard";
}

TEST(DistributionAware, DenseNeighbourhoodsAreDealtClassByClass) {
  // Per (neighbourhood, class), shard counts differ by at most 1: every shard gets the
  // neighbourhood's class mix, not just its share of examples.
  const Dataset d = Synthetic(3000, 4, 3, 16);
  ShardPlanOptions o = Options("distribution-aware", 7);
  o.clusters = 5;  // fewer neighbourhoods than hidden clusters: each mixes classes
  const ShardPlan plan = Plan(d, o);
  for (int c = 0; c < o.clusters; ++c) {
    if (plan.clusters[c].broadcast) continue;
    for (int label = 0; label < d.num_classes; ++label) {
      std::vector<int64_t> per_shard;
      for (const auto& shard : plan.shards) {
        int64_t n = 0;
        for (int64_t e : shard)
          n += (plan.cluster_of[e] == c && d.train.labels[e] == label) ? 1 : 0;
        per_shard.push_back(n);
      }
      ExpectWithinOne(per_shard,
                      "neighbourhood " + std::to_string(c) + " class " + std::to_string(label));
    }
  }
}

TEST(DistributionAware, WithFewWorkersEveryClusterIsDenseAndShardsPartition) {
  const Dataset d = Synthetic(1200);
  const ShardPlan plan = Plan(d, Options("distribution-aware", 3));
  for (const auto& c : plan.clusters) EXPECT_FALSE(c.broadcast);
  for (int m : Multiplicity(plan)) EXPECT_EQ(m, 1);
}

// Purity: each found cluster is credited with its most common hidden cluster.
double Purity(const std::vector<int32_t>& found, const std::vector<int32_t>& hidden) {
  std::map<int, std::map<int, int>> table;
  for (size_t i = 0; i < found.size(); ++i) ++table[found[i]][hidden[i]];
  int64_t agreed = 0;
  for (const auto& [cluster, counts] : table) {
    int best = 0;
    for (const auto& [h, n] : counts) best = std::max(best, n);
    agreed += best;
  }
  return static_cast<double>(agreed) / static_cast<double>(found.size());
}

TEST(KMeans, RecoversHiddenClustersOfTheSyntheticMixture) {
  const Dataset d = Synthetic(6000, 4, 3, 32, 1);
  ClusteringOptions o;
  o.clusters = 12;  // the 4 x 3 hidden sub-clusters
  o.pca_components = 16;
  o.seed = 1;
  auto result = PcaKMeans(d.train.features.data(), 6000, 32, o);
  ASSERT_TRUE(result.ok()) << result.status();
  const double purity = Purity(result->assignments, d.train.hidden_clusters);
  EXPECT_GE(purity, 0.9);
  // Coarse labels alone could not reach that: the hidden structure is finer than the classes.
  EXPECT_LT(Purity(d.train.labels, d.train.hidden_clusters), 0.9);
  EXPECT_GE(result->iterations, 1);
  EXPECT_LE(result->iterations, o.max_iterations);
}

TEST(KMeans, SampledPcaFitFindsTheSameNeighbourhoods) {
  const Dataset d = Synthetic(6000, 4, 3, 32, 1);
  ClusteringOptions o;
  o.clusters = 12;
  o.pca_components = 16;
  o.pca_fit_examples = 1000;
  auto result = PcaKMeans(d.train.features.data(), 6000, 32, o);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GE(Purity(result->assignments, d.train.hidden_clusters), 0.9);
}

TEST(KMeans, StopsAtMaxIterations) {
  const Dataset d = Synthetic(2000, 4, 3, 32, 1);
  ClusteringOptions o;
  o.clusters = 20;
  o.pca_components = 16;
  o.max_iterations = 1;
  auto result = PcaKMeans(d.train.features.data(), 2000, 32, o);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->iterations, 1);
}

struct BadOption {
  std::string name;
  ShardPlanOptions options;
  std::string message;
};

void PrintTo(const BadOption& option, std::ostream* os) { *os << option.name; }

class BadOptionsTest : public ::testing::TestWithParam<BadOption> {};

TEST_P(BadOptionsTest, RefusedWithTheKeyNamed) {
  const Dataset d = Synthetic(100, 4, 3, 16);
  auto plan = MakeShardPlan(d.train, 16, d.num_classes, GetParam().options);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr(GetParam().message));
}

ShardPlanOptions With(std::function<void(ShardPlanOptions&)> change) {
  ShardPlanOptions o = Options("distribution-aware", 4);
  change(o);
  return o;
}

INSTANTIATE_TEST_SUITE_P(
    Options, BadOptionsTest,
    ::testing::Values(
        BadOption{"NoWorkers", With([](auto& o) { o.workers = 0; }), "workers must be >= 1, got 0"},
        BadOption{"MoreWorkersThanExamples", With([](auto& o) { o.workers = 101; }),
                  "workers (101) is more than the examples"},
        BadOption{"NoClusters", With([](auto& o) { o.clusters = 0; }), "clusters must be >= 1"},
        BadOption{"MoreClustersThanExamples", With([](auto& o) { o.clusters = 101; }),
                  "clusters (101) is more than the examples"},
        BadOption{"PcaAboveDimension", With([](auto& o) { o.pca_components = 17; }),
                  "pca_components (17) is above the data dimension (16"},
        BadOption{"UnknownMethod",
                  With([](auto& o) { o.method = static_cast<v1::ShardMethod>(99); }),
                  "unknown sharding method 99"}),
    [](const auto& info) { return info.param.name; });

class PlanDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("sharder-unit-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  PlanProvenance Provenance() {
    PlanProvenance p;
    p.dataset.name = v1::DATASET_SYNTHETIC;
    p.fingerprint = "crc32:00000000";
    return p;
  }

  // Only `keep` may be in root_: no staging directory may be left behind.
  void ExpectOnly(const std::set<std::string>& keep) {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(root_))
      names.insert(entry.path().filename().string());
    EXPECT_EQ(names, keep);
  }

  fs::path root_;
};

TEST_F(PlanDirectoryTest, ManifestAndIndexFilesDescribeThePlan) {
  const Dataset d = Synthetic(600);
  ShardPlanOptions o = Options("distribution-aware", 30);
  o.clusters = 24;
  const ShardPlan plan = Plan(d, o);
  const fs::path out = root_ / "shards";
  ASSERT_TRUE(WriteShardPlan(out.string(), plan, Provenance()).ok());
  for (int w = 0; w < 30; ++w) {
    auto index = ReadShardIndexFile((out / ShardIndexName(w)).string());
    ASSERT_TRUE(index.ok()) << index.status();
    EXPECT_EQ(index->indices, plan.shards[w]);
    EXPECT_EQ(index->examples, 600u);
  }
  auto text = ReadFile((out / "manifest.json").string());
  ASSERT_TRUE(text.ok());
  const nlohmann::json m = nlohmann::json::parse(*text);
  EXPECT_EQ(m["format"], "strata-shard-plan");
  EXPECT_EQ(m["method"], "distribution-aware");
  EXPECT_EQ(m["seed"], 1);
  EXPECT_EQ(m["examples"], 600);
  EXPECT_EQ(m["parameters"]["clusters"], 24);
  EXPECT_EQ(m["parameters"]["pca_components"], 8);
  EXPECT_EQ(m["dataset"]["name"], "synthetic");
  ASSERT_EQ(m["shards"].size(), 30u);
  EXPECT_EQ(m["shards"][3]["worker"], 3);
  EXPECT_EQ(m["shards"][3]["count"], plan.shards[3].size());
  EXPECT_EQ(m["shards"][3]["class_counts"].get<std::vector<int64_t>>(), plan.shard_class_counts[3]);
  ASSERT_EQ(m["clusters"].size(), 24u);
  int64_t total = 0;
  for (const auto& c : m["clusters"]) total += c["size"].get<int64_t>();
  EXPECT_EQ(total, 600);
  for (const char* phase : {"pca", "kmeans", "split", "total"}) {
    EXPECT_TRUE(m["seconds"].contains(phase)) << phase;
  }
  ExpectOnly({"shards"});
}

TEST_F(PlanDirectoryTest, ReplacesAnEarlierPlanAtomically) {
  const Dataset d = Synthetic(300);
  const fs::path out = root_ / "shards";
  ASSERT_TRUE(WriteShardPlan(out.string(), Plan(d, Options("mod", 6)), Provenance()).ok());
  ASSERT_TRUE(WriteShardPlan(out.string(), Plan(d, Options("random", 2)), Provenance()).ok());
  EXPECT_TRUE(fs::exists(out / "shard-1.idx"));
  EXPECT_FALSE(fs::exists(out / "shard-2.idx")) << "files of the old plan survived";
  auto text = ReadFile((out / "manifest.json").string());
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(nlohmann::json::parse(*text)["method"], "random");
  ExpectOnly({"shards"});
}

TEST_F(PlanDirectoryTest, RefusesToReplaceSomethingThatIsNotAPlan) {
  const Dataset d = Synthetic(300);
  const fs::path file = root_ / "a-file";
  std::ofstream(file) << "precious";
  auto status = WriteShardPlan(file.string(), Plan(d, Options("mod", 2)), Provenance());
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("not a directory"));
  const fs::path dir = root_ / "home";
  fs::create_directories(dir);
  std::ofstream(dir / "notes.txt") << "precious";
  status = WriteShardPlan(dir.string(), Plan(d, Options("mod", 2)), Provenance());
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("is not a shard plan"));
  EXPECT_EQ(*ReadFile(file.string()), "precious");
  EXPECT_EQ(*ReadFile((dir / "notes.txt").string()), "precious");
  EXPECT_FALSE(fs::exists(dir / "manifest.json"));
  ExpectOnly({"a-file", "home"});
}

TEST_F(PlanDirectoryTest, StatsOfAStratifiedPlanShowNoDeviationAboveOneExample) {
  const Dataset d = Synthetic(2011);
  const fs::path out = root_ / "shards";
  ASSERT_TRUE(WriteShardPlan(out.string(), Plan(d, Options("stratified", 12)), Provenance()).ok());
  auto text = ReadFile((out / "manifest.json").string());
  ASSERT_TRUE(text.ok());
  auto balance = shard::ComputeShardBalance(*text, "manifest.json");
  ASSERT_TRUE(balance.ok()) << balance.status();
  EXPECT_LE(std::abs(balance->overall_max), 1.0);
  auto table = shard::ShardStats(out.string());
  ASSERT_TRUE(table.ok());
  EXPECT_THAT(*table, HasSubstr("overall largest deviation"));
}

}  // namespace
}  // namespace strata::sharder
