// What the common helpers refuse when a request points them at hostile input: paths that leave
// the run directory, files that are not regular or too large, checkpoint headers that lie about
// their sizes, tensor headers that declare more than they carry, and SGD steps that overflow.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "services/common/base/files.h"
#include "services/common/base/run_paths.h"
#include "services/common/ml/sgd.h"
#include "services/common/wire/checkpoint.h"
#include "services/common/wire/tensor_codec.h"
#include "tests/support/crafted_checkpoint.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

class InputLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "strata-limits-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    run_ = dir_ / "run";
    fs::create_directories(run_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  fs::path dir_, run_;
};

// ---- Creating and opening files in a shared run directory ---------------------------------------

// Every container of a compose or Kubernetes job mounts the run volume, so any of them can plant
// a link where a service is about to write. Broken on purpose (the old `path.tmp.PID` opened with
// O_CREAT | O_TRUNC and no O_EXCL | O_NOFOLLOW, and no `beneath` walk), this test failed: the
// victim outside held the checkpoint bytes, the write through `linked/` succeeded, and the mode
// was 0644.
TEST_F(InputLimitsTest, WritesFollowNoLinkAndArePrivate) {
  const fs::path victim = dir_ / "victim";
  ASSERT_TRUE(WriteFileAtomic(victim.string(), "precious").ok());
  // A link at every name a writer could predict for the temporary file, and a directory link.
  for (int pid = 1; pid < 64; ++pid) {
    fs::create_symlink(victim, run_ / ("model.ckpt.tmp." + std::to_string(pid)));
  }
  if (getpid() >= 64) {
    fs::create_symlink(victim, run_ / ("model.ckpt.tmp." + std::to_string(getpid())));
  }
  fs::create_directories(dir_ / "elsewhere");
  fs::create_symlink(dir_ / "elsewhere", run_ / "linked");

  FileAccessOptions confined;
  confined.beneath = run_.string();
  ASSERT_TRUE(WriteFileAtomic((run_ / "model.ckpt").string(), "model", confined).ok());
  EXPECT_EQ(ReadFile(victim.string()).value_or(""), "precious");
  struct stat st;
  ASSERT_EQ(::stat((run_ / "model.ckpt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  // A link below the confining directory is not followed, for writing or reading.
  absl::Status through =
      WriteFileAtomic((run_ / "linked" / "model.ckpt").string(), "model", confined);
  EXPECT_EQ(through.code(), absl::StatusCode::kPermissionDenied) << through;
  EXPECT_NE(through.message().find("linked"), std::string::npos) << through;
  EXPECT_FALSE(fs::exists(dir_ / "elsewhere" / "model.ckpt"));
  fs::create_symlink(victim, run_ / "alias.ckpt");
  auto read = ReadFile((run_ / "alias.ckpt").string(), confined);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kPermissionDenied) << read.status();
  EXPECT_EQ(ReadFile((run_ / "model.ckpt").string(), confined).value_or(""), "model");

  // Missing directories below are created 0700; so are the ones MakeDirs creates.
  ASSERT_TRUE(WriteFileAtomic((run_ / "a" / "b.ckpt").string(), "x", confined).ok());
  ASSERT_EQ(::stat((run_ / "a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_TRUE(MakeDirs((dir_ / "runs" / "r1").string()).ok());
  ASSERT_EQ(::stat((dir_ / "runs" / "r1").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

// ---- ResolveInRunDir ----------------------------------------------------------------------------

TEST_F(InputLimitsTest, PathsInsideTheRunDirectoryResolve) {
  auto relative = ResolveInRunDir(run_.string(), "checkpoints/a.ckpt", "path");
  ASSERT_TRUE(relative.ok()) << relative.status();
  EXPECT_EQ(*relative, (fs::canonical(run_) / "checkpoints/a.ckpt").string());
  auto absolute = ResolveInRunDir(run_.string(), (run_ / "x/../b.ckpt").string(), "path");
  ASSERT_TRUE(absolute.ok()) << absolute.status();
  EXPECT_EQ(*absolute, (fs::canonical(run_) / "b.ckpt").string());
  // A symlink that stays inside is followed.
  fs::create_directories(run_ / "real");
  fs::create_directory_symlink(run_ / "real", run_ / "alias");
  auto linked = ResolveInRunDir(run_.string(), "alias/c.ckpt", "path");
  ASSERT_TRUE(linked.ok()) << linked.status();
  EXPECT_EQ(*linked, (fs::canonical(run_) / "real/c.ckpt").string());
}

TEST_F(InputLimitsTest, PathsLeavingTheRunDirectoryAreRefusedNamingThem) {
  for (const std::string& requested :
       {std::string("/etc/shadow"), std::string("../outside.ckpt"),
        std::string("checkpoints/../../outside.ckpt"), (dir_ / "run2/x").string()}) {
    auto r = ResolveInRunDir(run_.string(), requested, "SaveCheckpoint path");
    ASSERT_FALSE(r.ok()) << requested;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied) << r.status();
    EXPECT_NE(r.status().message().find(requested), std::string::npos) << r.status();
  }
  // A symlink inside the run directory that points out of it, to a file or a directory.
  fs::create_symlink("/dev/zero", run_ / "zero.ckpt");
  fs::create_directory_symlink("/etc", run_ / "etc");
  for (const std::string requested : {"zero.ckpt", "etc/passwd", "etc/new-file"}) {
    auto r = ResolveInRunDir(run_.string(), requested, "LoadCheckpoint path");
    ASSERT_FALSE(r.ok()) << requested;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied) << r.status();
  }
}

TEST_F(InputLimitsTest, WithoutARunDirectoryNoPathIsAccepted) {
  auto r = ResolveInRunDir("", (run_ / "a.ckpt").string(), "path");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ResolveInRunDir(run_.string(), "", "path").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveInRunDir(run_.string(), std::string("a\0b", 3), "path").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- ReadFile -----------------------------------------------------------------------------------

TEST_F(InputLimitsTest, ReadFileRefusesDevicesAtOnce) {
  // Before: /dev/zero was read until the process ran out of memory.
  auto r = ReadFile("/dev/zero");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("not a regular file"), std::string::npos);
  EXPECT_EQ(ReadFile(run_.string()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(InputLimitsTest, ReadFileRefusesAFifoWithoutBlocking) {
  const std::string fifo = (run_ / "fifo").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // Before: open() waited for a writer for ever. A generous bound, then unblock a stuck reader so
  // that the test fails instead of hanging.
  auto read = std::async(std::launch::async, [&] { return ReadFile(fifo); });
  if (read.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "ReadFile blocked on a FIFO";
    int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  EXPECT_EQ(read.get().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(InputLimitsTest, ReadFileRefusesFilesAboveTheCapBeforeReading) {
  const std::string path = (run_ / "eleven").string();
  ASSERT_TRUE(WriteFileAtomic(path, "01234567890").ok());
  EXPECT_EQ(ReadFile(path, 10).status().code(), absl::StatusCode::kResourceExhausted);
  auto whole = ReadFile(path, 11);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(*whole, "01234567890");
  EXPECT_EQ(ReadFile((run_ / "missing").string()).status().code(), absl::StatusCode::kNotFound);
}

// ---- ParseCheckpoint ----------------------------------------------------------------------------

nlohmann::json Meta(nlohmann::json tensors) {
  return {{"epoch", 0}, {"step", 0}, {"version", 0}, {"tensors", std::move(tensors)}};
}

nlohmann::json Tensor(const std::string& name, nlohmann::json shape, nlohmann::json bytes) {
  return {{"name", name},
          {"shape", std::move(shape)},
          {"dtype", "float32"},
          {"kind", "parameter"},
          {"bytes", std::move(bytes)}};
}

TEST_F(InputLimitsTest, CheckpointWithNegativeDimensionIsRefused) {
  // Before: shape [-1] with bytes 2^64-4 and a second tensor of 4 bytes summed to 0 mod 2^64,
  // passed every check and the copy threw (UNKNOWN from the handler, abort at start-up).
  const std::string bytes =
      testing::CraftedCheckpoint(Meta({Tensor("w", {-1}, uint64_t{0} - 4), Tensor("b", {1}, 4)}));
  Checkpoint parsed;
  absl::Status status;
  EXPECT_NO_THROW({
    auto r = ParseCheckpoint(bytes, "crafted");
    status = r.status();
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find("negative dimension"), std::string::npos) << status;
}

TEST_F(InputLimitsTest, CheckpointWhoseSizesWrapIsRefused) {
  // 2^62 x 4 floats: the element count wraps size_t to 0 bytes.
  const std::string bytes =
      testing::CraftedCheckpoint(Meta({Tensor("w", {int64_t{1} << 62, 4}, 0)}));
  absl::Status status;
  EXPECT_NO_THROW(status = ParseCheckpoint(bytes, "crafted").status());
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  // A shape larger than the file, honestly declared.
  const std::string big =
      testing::CraftedCheckpoint(Meta({Tensor("w", {1 << 20, 1 << 10}, uint64_t{1} << 32)}));
  EXPECT_NO_THROW(status = ParseCheckpoint(big, "crafted").status());
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  // Negative or non-numeric byte counts, and a non-array tensor list.
  EXPECT_NO_THROW(
      status =
          ParseCheckpoint(testing::CraftedCheckpoint(Meta({Tensor("w", {1}, -4)})), "c").status());
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NO_THROW(
      status =
          ParseCheckpoint(testing::CraftedCheckpoint(Meta({Tensor("w", {1}, "4")})), "c").status());
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NO_THROW(status = ParseCheckpoint(testing::CraftedCheckpoint(Meta(7)), "c").status());
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
}

TEST_F(InputLimitsTest, CheckpointNumbersThatAreNoIntegersAreRefused) {
  // Found by the checkpoint fuzz target: an epoch of 1e300 was converted to int64_t (undefined
  // behaviour), and a dimension of 1.7 was read as 1.
  std::vector<nlohmann::json> metas(5, Meta({Tensor("w", {1}, 4)}));
  metas[0]["epoch"] = 1e300;
  metas[1]["step"] = 0.5;
  metas[2]["version"] = uint64_t{1} << 63;  // beyond int64_t
  metas[3]["tensors"][0]["shape"] = {1.7};
  metas[4]["tensors"][0]["shape"] = {4, 92233720368547758083.0};  // the fuzzer's input
  for (const nlohmann::json& meta : metas) {
    absl::Status status;
    EXPECT_NO_THROW(
        status =
            ParseCheckpoint(testing::CraftedCheckpoint(meta, std::string(4, '\0')), "c").status());
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << meta.dump();
    EXPECT_NE(status.message().find("not an integer"), std::string::npos) << status;
  }
  nlohmann::json shape_not_a_list = Meta({Tensor("w", 1, 4)});
  EXPECT_EQ(ParseCheckpoint(testing::CraftedCheckpoint(shape_not_a_list, std::string(4, '\0')), "c")
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
}

TEST_F(InputLimitsTest, HonestCraftedCheckpointStillParses) {
  std::string payload(3 * 4, '\0');
  const float one = 1.0f;
  std::memcpy(payload.data() + 4, &one, 4);
  auto r = ParseCheckpoint(
      testing::CraftedCheckpoint(Meta({Tensor("w", {3}, 12), Tensor("e", {0, 5}, 0)}), payload),
      "crafted");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->entries.size(), 2u);
  EXPECT_EQ(r->entries[0].tensor.floats()[1], 1.0f);
  EXPECT_EQ(r->entries[1].tensor.data.size(), 0u);
}

// ---- DecodeAll ----------------------------------------------------------------------------------

long PeakRssKb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

TEST_F(InputLimitsTest, DecodeAllRefusesAHeaderDeclaringMoreThanTheChunksCarry) {
  // 16 bytes of data under a header declaring 1 GiB of float32.
  v1::TensorChunk chunk;
  chunk.mutable_header()->set_name("huge");
  chunk.mutable_header()->add_shape(int64_t{1} << 28);
  chunk.mutable_header()->set_dtype(v1::DTYPE_FLOAT32);
  chunk.set_data(std::string(16, '\0'));
  const long before = PeakRssKb();
  auto r = DecodeAll({chunk});
  const long grew_mb = (PeakRssKb() - before) / 1024;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  // Before: the 1 GiB was allocated (and zeroed) first, then the stream found truncated.
  EXPECT_LT(grew_mb, 64) << "peak RSS grew by " << grew_mb << " MiB";
}

// ---- SgdStepInto --------------------------------------------------------------------------------

TEST_F(InputLimitsTest, SgdStepIntoMatchesSgdStepAndReportsOverflow) {
  float p[3] = {1, -2, 0.5f}, g[3] = {0.1f, 0.2f, -0.3f}, v[3] = {0.01f, 0, 0.02f};
  float p2[3], v2[3];
  const SgdOptions o{0.1f, 0.9f, 0.01f};
  ASSERT_TRUE(SgdStepInto(p, g, v, p2, v2, 3, o));
  SgdStep(p, g, v, 3, o);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(p2[i], p[i]);
    EXPECT_EQ(v2[i], v[i]);
  }
  // Finite inputs whose step overflows: refused, inputs untouched.
  float q[2] = {0, 0}, big[2] = {FLT_MAX / 2, 1}, w[2] = {0, 0}, q2[2], w2[2];
  EXPECT_FALSE(SgdStepInto(q, big, w, q2, w2, 2, {10.0f, 0.9f, 0}));
  EXPECT_EQ(q[0], 0.0f);
  EXPECT_EQ(w[0], 0.0f);
}

}  // namespace
}  // namespace strata
