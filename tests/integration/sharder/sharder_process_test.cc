// The sharder as users run it: `strata shard` and `strata-sharder` processes (good and bad input,
// exit codes, messages, output directories) and the Sharder gRPC service in its own process.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "services/common/base/files.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/shard_index.h"
#include "strata/v1/sharder.grpc.pb.h"
#include "tests/integration/sharder/subprocess.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::Subprocess;

constexpr auto kRunTimeout = std::chrono::seconds(120);  // the machine is shared and loaded
const char* kStrata = STRATA_BIN;
const char* kSharder = STRATA_SHARDER_BIN;
const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";

class SharderProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Parameterised test names hold '/': flatten them so that TearDown removes everything.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::temp_directory_path() / ("sharder-it-" + std::to_string(::getpid()) + "-" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  struct Result {
    int exit_code = -1;
    std::string out, err;
  };

  Result Run(std::vector<std::string> argv) {
    Subprocess p(argv, dir_);
    auto code = p.Wait(kRunTimeout);
    EXPECT_TRUE(code.has_value()) << argv[0] << " did not finish within the deadline";
    return {code.value_or(-1), p.Stdout(), p.Stderr()};
  }

  std::vector<std::vector<int64_t>> ReadShards(const fs::path& out, int workers) {
    std::vector<std::vector<int64_t>> shards;
    for (int w = 0; w < workers; ++w) {
      auto indices = ReadShardIndex((out / ("shard-" + std::to_string(w) + ".idx")).string());
      EXPECT_TRUE(indices.ok()) << indices.status();
      shards.push_back(indices.ok() ? *indices : std::vector<int64_t>{});
    }
    return shards;
  }

  nlohmann::json Manifest(const fs::path& out) {
    auto text = ReadFile((out / "manifest.json").string());
    EXPECT_TRUE(text.ok()) << text.status();
    return text.ok() ? nlohmann::json::parse(*text) : nlohmann::json();
  }

  // Nothing but `keep` in the test directory (and the captured process output).
  void ExpectNoOutputBesides(const std::set<std::string>& keep) {
    for (const auto& entry : fs::directory_iterator(dir_)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("proc-", 0) == 0 || keep.count(name) > 0) continue;
      ADD_FAILURE() << "left behind: " << entry.path();
    }
  }

  fs::path dir_;
};

TEST_F(SharderProcessTest, StrataShardStratifiedOnFashionMnistSubsetThenStats) {
  const fs::path out = dir_ / "plan";
  Result r = Run({kStrata, "shard", "--dataset", "fashion-mnist", "--data", kFashionMnist,
                  "--max-train", "3000", "--workers", "12", "--method", "stratified", "--seed", "1",
                  "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("stratified plan of 3000 fashion-mnist examples over 12 workers"));
  const auto shards = ReadShards(out, 12);
  std::vector<int> seen(3000, 0);
  for (const auto& s : shards) {
    EXPECT_EQ(s.size(), 250u);
    for (int64_t e : s) ++seen.at(e);
  }
  for (int n : seen) EXPECT_EQ(n, 1);
  const nlohmann::json m = Manifest(out);
  EXPECT_EQ(m["method"], "stratified");
  EXPECT_EQ(m["dataset"]["name"], "fashion-mnist");
  EXPECT_EQ(m["dataset"]["fingerprint"].get<std::string>().rfind("crc32:", 0), 0u);
  EXPECT_EQ(m["dataset"]["files"].size(), 4u);

  Result stats = Run({kStrata, "shard", "--stats", out.string()});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_THAT(stats.out,
              HasSubstr("stratified plan of 3000 fashion-mnist examples over 12 workers"));
  EXPECT_THAT(stats.out, HasSubstr("overall largest deviation"));
  ExpectNoOutputBesides({"plan"});
}

TEST_F(SharderProcessTest, StrataShardFromAJobSpec) {
  const fs::path spec = dir_ / "job.yaml";
  std::ofstream(spec)
      << "name: shard-test\n"
         "dataset: { name: synthetic }\n"
         "training: { seed: 5 }\n"
         "cluster: { workers: 3 }\n"
         "sharding: { method: distribution-aware, clusters: 12, pca_components: 8 }\n";
  const fs::path out = dir_ / "shards";
  Result r = Run({kStrata, "shard", spec.string(), "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json m = Manifest(out);
  EXPECT_EQ(m["method"], "distribution-aware");
  EXPECT_EQ(m["seed"], 5);
  EXPECT_EQ(m["parameters"]["workers"], 3);
  EXPECT_EQ(m["parameters"]["clusters"], 12);
  EXPECT_EQ(m["clusters"].size(), 12u);
  EXPECT_EQ(ReadShards(out, 3).size(), 3u);
  EXPECT_FALSE(fs::exists(out / "shard-3.idx"));

  // The orchestrator's call: strata-sharder --job RUN_DIR/job.resolved.txtpb --out RUN_DIR/shards
  // (the spec resolved by `strata resolve`), or the spec itself, with a flag overriding it. The
  // same data, method and seed give the same plan.
  const fs::path resolved = dir_ / "job.resolved.txtpb";
  r = Run({kStrata, "resolve", spec.string(), "--out", resolved.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path again = dir_ / "again";
  r = Run({kSharder, "--job", resolved.string(), "--out", again.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadShards(again, 3), ReadShards(out, 3));
  EXPECT_EQ(Manifest(again)["parameters"]["clusters"], 12);
  const fs::path from_yaml = dir_ / "from-yaml";
  r = Run({kSharder, "--config", spec.string(), "--out", from_yaml.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadShards(from_yaml, 3), ReadShards(out, 3));
  r = Run({kSharder, "--config", spec.string(), "--job", resolved.string(), "--out",
           (dir_ / "both").string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("give the job once"), std::string::npos) << r.err;
  const fs::path four = dir_ / "four";
  r = Run({kSharder, "--config", spec.string(), "--workers", "4", "--out", four.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Manifest(four)["parameters"]["workers"], 4);
}

TEST_F(SharderProcessTest, Cifar100LabelSetComesFromTheSpecOrFlag) {
  // A small CIFAR-100 binary set: records of coarse label, fine label, 3072 pixels.
  const fs::path data = dir_ / "cifar-100-binary";
  fs::create_directories(data);
  for (const char* name : {"train.bin", "test.bin"}) {
    std::ofstream f(data / name, std::ios::binary);
    for (int i = 0; i < 200; ++i) {
      f.put(static_cast<char>(i % 20)).put(static_cast<char>(i % 100));
      f << std::string(3072, static_cast<char>(i));
    }
  }
  const fs::path spec = dir_ / "job.yaml";
  std::ofstream(spec) << "name: c100\n"
                         "dataset: { name: cifar100, path: "
                      << dir_.string()
                      << ", label_set: coarse }\n"
                         "cluster: { workers: 4 }\n";
  const fs::path coarse = dir_ / "coarse";
  Result r = Run({kStrata, "shard", spec.string(), "--out", coarse.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json m = Manifest(coarse);
  EXPECT_EQ(m["method"], "stratified");
  EXPECT_EQ(m["parameters"]["label_set"], "coarse");
  EXPECT_EQ(m["dataset"]["num_classes"], 20);
  for (const auto& shard : m["shards"]) {
    for (const auto& count : shard["class_counts"])
      EXPECT_LE(count.get<int64_t>(), 3);  // 10 per class / 4
  }
  const fs::path fine = dir_ / "fine";
  r = Run({kStrata, "shard", spec.string(), "--label-set", "fine", "--out", fine.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  m = Manifest(fine);
  EXPECT_EQ(m["parameters"]["label_set"], "fine");
  EXPECT_EQ(m["class_counts"].size(), 100u);
  r = Run(
      {kStrata, "shard", spec.string(), "--label-set", "medium", "--out", (dir_ / "bad").string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("label_set must be fine or coarse, got 'medium'"));
  EXPECT_FALSE(fs::exists(dir_ / "bad"));
}

struct BadInput {
  std::string name;
  std::vector<std::string> args;  // after the program (and "shard")
  std::string message;
};

// Names the case in test listings instead of dumping its bytes.
void PrintTo(const BadInput& input, std::ostream* os) { *os << input.name; }

class BadInputTest : public SharderProcessTest, public ::testing::WithParamInterface<BadInput> {};

std::vector<std::string> Synthetic(std::vector<std::string> more) {
  std::vector<std::string> args = {"--dataset", "synthetic", "--max-train", "500"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST_P(BadInputTest, NonZeroExitClearMessageNoOutputDirectory) {
  for (const bool through_strata : {true, false}) {
    const fs::path out = dir_ / "plan";
    std::vector<std::string> argv = {through_strata ? kStrata : kSharder};
    if (through_strata) argv.push_back("shard");
    argv.insert(argv.end(), GetParam().args.begin(), GetParam().args.end());
    argv.push_back("--out");
    argv.push_back(out.string());
    Result r = Run(argv);
    EXPECT_NE(r.exit_code, 0) << argv[0];
    EXPECT_THAT(r.err, HasSubstr(GetParam().message)) << argv[0];
    EXPECT_FALSE(fs::exists(out)) << argv[0] << " left " << out;
    ExpectNoOutputBesides({"corrupt"});
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sharder, BadInputTest,
    ::testing::Values(
        BadInput{"NoWorkers", Synthetic({"--workers", "0", "--method", "random"}),
                 "workers must be >= 1, got 0"},
        BadInput{"MoreWorkersThanExamples", Synthetic({"--workers", "501", "--method", "mod"}),
                 "workers (501) is more than the examples in the training split (500)"},
        BadInput{"NoClusters",
                 Synthetic({"--workers", "4", "--method", "distribution-aware", "--clusters", "0"}),
                 "clusters must be >= 1, got 0"},
        BadInput{
            "MoreClustersThanExamples",
            Synthetic({"--workers", "4", "--method", "distribution-aware", "--clusters", "501"}),
            "clusters (501) is more than the examples in the training split (500)"},
        BadInput{"PcaAboveDimension",
                 Synthetic({"--workers", "4", "--method", "distribution-aware", "--pca-components",
                            "33"}),
                 "pca_components (33) is above the data dimension (32 floats per example)"},
        BadInput{"UnknownMethod", Synthetic({"--workers", "4", "--method", "kmeans"}),
                 "unknown sharding method 'kmeans' (known: random, mod, stratified, "
                 "distribution-aware)"},
        BadInput{"UnknownDataset",
                 {"--dataset", "imagenet", "--data", "/tmp", "--workers", "4"},
                 "unknown dataset 'imagenet'"},
        BadInput{"MissingFiles",
                 {"--dataset", "mnist", "--data", "/nonexistent/mnist", "--workers", "4"},
                 "missing data file /nonexistent/mnist/train-images-idx3-ubyte"},
        BadInput{"MissingJobSpec",
                 {"/nonexistent/job.yaml", "--workers", "4"},
                 "/nonexistent/job.yaml"}),
    [](const auto& info) { return info.param.name; });

TEST_F(SharderProcessTest, CorruptDataFileIsNamedAndNothingIsWritten) {
  // A Fashion-MNIST directory whose training images are cut short.
  const fs::path data = dir_ / "corrupt";
  fs::create_directories(data);
  for (const char* name :
       {"train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    fs::copy_file(fs::path(kFashionMnist) / name, data / name);
  }
  {
    auto images = ReadFile((fs::path(kFashionMnist) / "train-images-idx3-ubyte.gz").string());
    ASSERT_TRUE(images.ok());
    std::ofstream(data / "train-images-idx3-ubyte.gz", std::ios::binary)
        << images->substr(0, images->size() / 2);
  }
  const fs::path out = dir_ / "plan";
  Result r = Run({kStrata, "shard", "--dataset", "fashion-mnist", "--data", data.string(),
                  "--workers", "4", "--method", "stratified", "--out", out.string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr((data / "train-images-idx3-ubyte.gz").string()));
  EXPECT_FALSE(fs::exists(out));
  ExpectNoOutputBesides({"corrupt"});
}

TEST_F(SharderProcessTest, FailedRunLeavesAnEarlierPlanIntact) {
  const fs::path out = dir_ / "plan";
  ASSERT_EQ(Run({kStrata, "shard", "--dataset", "synthetic", "--workers", "2", "--method", "mod",
                 "--out", out.string()})
                .exit_code,
            0);
  const auto before = ReadShards(out, 2);
  Result r = Run({kStrata, "shard", "--dataset", "synthetic", "--workers", "2", "--method",
                  "distribution-aware", "--pca-components", "999", "--out", out.string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(ReadShards(out, 2), before);
  EXPECT_EQ(Manifest(out)["method"], "mod");
  ExpectNoOutputBesides({"plan"});
}

TEST_F(SharderProcessTest, StatsOfAMissingPlanFailsClearly) {
  Result r = Run({kStrata, "shard", "--stats", (dir_ / "nothing").string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr((dir_ / "nothing" / "manifest.json").string()));
}

// The Sharder service in a real process on loopback.
class SharderServiceTest : public SharderProcessTest {
 protected:
  // Requests may name paths inside `run_dir` only (default: the test's directory). `prefix`
  // runs the server under another command (prlimit).
  void StartServer(fs::path run_dir = {}, std::vector<std::string> prefix = {}) {
    if (run_dir.empty()) run_dir = dir_;
    port_file_ = dir_ / "port";
    std::vector<std::string> argv = std::move(prefix);
    for (const std::string& a :
         {std::string(kSharder), std::string("serve"), std::string("--listen"),
          std::string("127.0.0.1:0"), std::string("--port-file"), port_file_.string(),
          std::string("--log-file"), (dir_ / "sharder.log").string(), std::string("--run-dir"),
          run_dir.string()}) {
      argv.push_back(a);
    }
    server_ = std::make_unique<Subprocess>(argv, dir_);
    const auto deadline = std::chrono::steady_clock::now() + kRunTimeout;
    std::string port;
    while (std::chrono::steady_clock::now() < deadline) {
      auto text = ReadFile(port_file_.string());
      if (text.ok() && !text->empty()) {
        port = text->substr(0, text->find('\n'));
        break;
      }
      ASSERT_FALSE(server_->Wait(std::chrono::milliseconds(50)).has_value())
          << "strata-sharder serve exited: " << server_->Stderr();
    }
    ASSERT_FALSE(port.empty()) << "no port file within the deadline";
    stub_ = v1::Sharder::NewStub(MakeChannel("127.0.0.1:" + port));
  }

  grpc::Status Shard(const v1::ShardRequest& request, v1::ShardReply* reply,
                     std::chrono::seconds deadline = std::chrono::seconds(120)) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(deadline));
    return stub_->Shard(&context, request, reply);
  }

  fs::path port_file_;
  std::unique_ptr<Subprocess> server_;
  std::unique_ptr<v1::Sharder::Stub> stub_;
};

TEST_F(SharderServiceTest, PlansOnRequestRefusesBadRequestsAndStops) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  v1::ShardRequest request;
  request.set_dataset("synthetic");
  request.set_max_train(1200);
  request.set_workers(5);
  request.set_method("distribution-aware");
  request.set_clusters(12);
  request.set_pca_components(8);
  request.set_seed(3);
  request.set_out_dir((dir_ / "run" / "shards").string());
  v1::ShardReply reply;
  grpc::Status status = Shard(request, &reply);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(reply.method(), "distribution-aware");
  EXPECT_EQ(reply.examples(), 1200);
  ASSERT_EQ(reply.shards_size(), 5);
  EXPECT_EQ(reply.clusters_size(), 12);
  EXPECT_TRUE(reply.phase_seconds().count("kmeans"));
  int64_t in_clusters = 0;
  for (const auto& c : reply.clusters()) in_clusters += c.size();
  EXPECT_EQ(in_clusters, 1200);
  const auto shards = ReadShards(dir_ / "run" / "shards", 5);
  for (int w = 0; w < 5; ++w) {
    EXPECT_EQ(static_cast<int64_t>(shards[w].size()), reply.shards(w).count());
  }
  EXPECT_EQ(reply.manifest_path(), (dir_ / "run" / "shards" / "manifest.json").string());

  // A bad request is refused with the key named; nothing is written; the service carries on.
  v1::ShardRequest bad = request;
  bad.set_pca_components(500);
  bad.set_out_dir((dir_ / "bad").string());
  v1::ShardReply bad_reply;
  status = Shard(bad, &bad_reply);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("pca_components (500) is above the data dimension"));
  EXPECT_FALSE(fs::exists(dir_ / "bad"));
  bad.set_pca_components(8);
  bad.set_method("nearest");
  status = Shard(bad, &bad_reply);
  EXPECT_THAT(status.error_message(), HasSubstr("unknown sharding method 'nearest'"));

  // A run directory alone: its job.yaml, the plan into RUN_DIR/shards.
  const fs::path run = dir_ / "run2";
  fs::create_directories(run);
  std::ofstream(run / "job.yaml") << "name: run2\ndataset: { name: synthetic, max_train: 600 }\n"
                                     "cluster: { workers: 2 }\nsharding: { method: random }\n";
  v1::ShardRequest by_run_dir;
  by_run_dir.set_run_dir(run.string());
  status = Shard(by_run_dir, &reply);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(reply.method(), "random");
  EXPECT_EQ(reply.examples(), 600);
  EXPECT_EQ(ReadShards(run / "shards", 2)[0].size(), 300u);

  v1::ShardRequest stratified = request;
  stratified.set_method("stratified");
  stratified.set_out_dir((dir_ / "stratified").string());
  status = Shard(stratified, &reply);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(reply.method(), "stratified");

  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(std::chrono::seconds(30)));
  v1::StopRequest stop;
  stop.set_reason("test done");
  v1::StopReply stop_reply;
  ASSERT_TRUE(stub_->Stop(&context, stop, &stop_reply).ok());
  auto code = server_->Wait(std::chrono::seconds(60));
  ASSERT_TRUE(code.has_value()) << "strata-sharder serve did not exit after Stop";
  EXPECT_EQ(*code, 0) << server_->Stderr();
}

// Paths of a request stay inside the service's --run-dir. Before: out_dir created directories
// anywhere, and a config pointing at any readable file came back in the job-spec errors line by
// line (an /etc/shadow hash, say).
TEST_F(SharderServiceTest, RequestPathsOutsideTheRunDirectoryAreRefused) {
  const fs::path runs = dir_ / "runs";
  fs::create_directories(runs);
  std::ofstream(dir_ / "secret.yaml") << "root: $6$hunter2-hash-line\n";
  fs::create_symlink(dir_ / "secret.yaml", runs / "linked.yaml");
  ASSERT_NO_FATAL_FAILURE(StartServer(runs));

  v1::ShardRequest base;
  base.set_dataset("synthetic");
  base.set_max_train(200);
  base.set_workers(2);
  base.set_method("random");
  v1::ShardReply reply;
  for (const std::string& config :
       {(dir_ / "secret.yaml").string(), std::string("linked.yaml"), std::string("/etc/shadow")}) {
    v1::ShardRequest r;
    r.set_config(config);
    r.set_out_dir((runs / "a").string());
    grpc::Status status = Shard(r, &reply);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(config));
    EXPECT_THAT(status.error_message(), ::testing::Not(HasSubstr("hunter2")));
  }
  for (const std::string& out : {(dir_ / "elsewhere").string(), std::string("../elsewhere2")}) {
    v1::ShardRequest r = base;
    r.set_out_dir(out);
    grpc::Status status = Shard(r, &reply);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  }
  EXPECT_FALSE(fs::exists(dir_ / "elsewhere"));
  EXPECT_FALSE(fs::exists(dir_ / "elsewhere2"));
  v1::ShardRequest by_run_dir;
  by_run_dir.set_run_dir(dir_.string());
  EXPECT_EQ(Shard(by_run_dir, &reply).error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // Inside, relative to the run directory, it plans as before.
  v1::ShardRequest inside = base;
  inside.set_out_dir("r1/shards");
  grpc::Status status = Shard(inside, &reply);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(ReadShards(runs / "r1" / "shards", 2)[0].size(), 100u);
}

// Data files are the sharder's input from a directory it does not own (a data set is usually
// shared between runs, and `data_path` is not confined). Before: a 16-byte IDX file declaring
// 4 GiB made the reader zero-fill 4 GiB, and a CIFAR batch linked to /dev/zero was read until
// memory ran out (under this test's address-space limit both ended in std::bad_alloc, which gRPC
// turned into UNKNOWN "Unexpected error in RPC handling"); a FIFO blocked the request for ever
// inside the planning lock, so it and the good request after it ended in DEADLINE_EXCEEDED. The
// test failed in exactly these ways against the old readers.
// Now each is refused at once, naming the file, and the server plans the next request.
TEST_F(SharderServiceTest, HostileDataFilesAreRefusedAndHoldUpNothing) {
  // A regular plan needs far less than 3 GB of address space; 4 GiB of zeros does not fit in it.
  ASSERT_NO_FATAL_FAILURE(StartServer({}, {"/usr/bin/prlimit", "--as=3000000000", "--"}));
  v1::ShardRequest good;
  good.set_dataset("synthetic");
  good.set_max_train(200);
  good.set_workers(2);
  good.set_method("random");
  good.set_out_dir((dir_ / "good").string());
  v1::ShardReply reply;

  auto plant = [&](const std::string& name, const std::vector<std::string>& files) {
    const fs::path data = dir_ / name;
    fs::create_directories(data);
    for (const std::string& f : files) std::ofstream(data / f) << "";
    return data;
  };
  // 16 bytes: IDX magic (unsigned bytes, rank 3), then 4096 x 1024 x 1024 images = 4 GiB.
  const fs::path idx =
      plant("idx", {"train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"});
  {
    const unsigned char header[16] = {0, 0, 8, 3, 0, 0, 0x10, 0, 0, 0, 4, 0, 0, 0, 4, 0};
    std::ofstream(idx / "train-images-idx3-ubyte", std::ios::binary)
        .write(reinterpret_cast<const char*>(header), sizeof header);
  }
  const std::vector<std::string> cifar_rest = {"data_batch_2.bin", "data_batch_3.bin",
                                               "data_batch_4.bin", "data_batch_5.bin",
                                               "test_batch.bin"};
  const fs::path zero = plant("zero", cifar_rest);
  fs::create_symlink("/dev/zero", zero / "data_batch_1.bin");
  const fs::path fifo = plant("fifo", cifar_rest);
  ASSERT_EQ(mkfifo((fifo / "data_batch_1.bin").c_str(), 0600), 0);

  struct Case {
    std::string dataset;
    fs::path data, file;
    std::string says;
  };
  for (const Case& c :
       {Case{"fashion-mnist", idx, idx / "train-images-idx3-ubyte", "holds at most"},
        Case{"cifar10", zero, zero / "data_batch_1.bin", "not a regular file"},
        Case{"cifar10", fifo, fifo / "data_batch_1.bin", "not a regular file"}}) {
    v1::ShardRequest hostile = good;
    hostile.set_dataset(c.dataset);
    hostile.set_data_path(c.data.string());
    hostile.set_out_dir((dir_ / "hostile").string());
    grpc::Status status = Shard(hostile, &reply, std::chrono::seconds(60));
    EXPECT_NE(status.error_code(), grpc::StatusCode::OK) << c.file;
    EXPECT_NE(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
    EXPECT_NE(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.file.string()));
    EXPECT_THAT(status.error_message(), HasSubstr(c.says));
    EXPECT_FALSE(fs::exists(dir_ / "hostile"));
    // The server is alive and not held up: the next good request plans.
    grpc::Status next = Shard(good, &reply, std::chrono::seconds(60));
    ASSERT_TRUE(next.ok()) << "after " << c.file << ": " << next.error_message();
    EXPECT_EQ(reply.examples(), 200);
  }
}

}  // namespace
}  // namespace strata
