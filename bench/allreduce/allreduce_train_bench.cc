// strata-bench-allreduce-train: data-parallel training throughput with the ring all-reduce
// synchroniser, N processes on loopback, set up like ../shared/peers/ddp_train.py: ResNet-20 on
// random 28x28x1 inputs, global batch 128 (128/N per process), SGD lr 0.1 momentum 0.9,
// max(1, 2/N) threads per process, 3 warm-up steps. Last line: samples_per_s=<value>.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

#include <CLI/CLI.hpp>

#include "bench/allreduce/rank_launcher.h"
#include "bench/common/bench_trainer.h"
#include "services/common/rpc.h"
#include "services/worker/allreduce_sync.h"

namespace {

int Fail(int rank, const absl::Status& status) {
  std::fprintf(stderr, "rank %d: %s\n", rank, status.ToString().c_str());
  return 1;
}

int RunRank(int rank, int world, const std::string& arch, int global_batch, int steps, int warmup,
            size_t segment_bytes, const std::string& transport, const std::string& dir) {
  const int batch = global_batch / world;
  const int threads = std::max(1, 2 / world);
  auto trainer = strata::bench::MakeBenchTrainer(arch, batch, threads, /*data_seed=*/1 + rank);
  if (!trainer.ok()) return Fail(rank, trainer.status());

  std::unique_ptr<strata::RingAllReduce> ring;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<strata::Synchroniser> sync;
  if (world > 1) {
    strata::bench::DieWithParent();
    ring = std::make_unique<strata::RingAllReduce>(rank);
    if (absl::Status s = strata::bench::JoinRing(ring.get(), transport, dir, rank, world,
                                                 std::chrono::seconds(120), &server);
        !s.ok()) {
      return Fail(rank, s);
    }
    strata::AllReduceOptions options;
    options.deadline = std::chrono::seconds(120);
    options.segment_bytes = segment_bytes;
    auto made = strata::MakeAllReduceSynchroniser(ring.get(), options);
    if (!made.ok()) return Fail(rank, made.status());
    sync = std::move(*made);
    if (absl::Status s = sync->Start(**trainer); !s.ok()) return Fail(rank, s);
  }

  (*trainer)->StartEpoch(0);
  std::chrono::steady_clock::time_point start;
  double comm_s = 0;
  for (int i = 0; i < steps + warmup; ++i) {
    if (i == warmup) {
      start = std::chrono::steady_clock::now();
      comm_s = 0;
    }
    auto stats = (*trainer)->ComputeGradients(0);
    if (!stats.ok()) return Fail(rank, stats.status());
    if (sync) {
      const auto t0 = std::chrono::steady_clock::now();
      strata::StepContext context;
      context.step = i;
      context.batch_examples = batch;
      if (absl::Status s = sync->Step(**trainer, context).status(); !s.ok()) return Fail(rank, s);
      comm_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } else {
      (*trainer)->ApplyGradients((*trainer)->SgdFor(0));
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (rank == 0) {
    std::printf(
        "strata-allreduce world=%d arch=%s global_batch=%d threads=%d steps=%d sync_share=%.1f%% "
        "samples_per_s=%.0f\n",
        world, arch.c_str(), global_batch, threads, steps, 100.0 * comm_s / secs,
        static_cast<double>(global_batch) * steps / secs);
    std::fflush(stdout);
  }
  strata::bench::LeaveRank(server.get());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"All-reduce training throughput, N processes on loopback"};
  int world = 2, steps = 20, warmup = 3, global_batch = 128, rank = -1;
  std::string arch = "resnet20", dir, transport = "tcp";
  size_t segment_bytes = strata::AllReduceOptions{}.segment_bytes;
  app.add_option("--world", world, "processes")->check(CLI::Range(1, 64));
  app.add_option("--steps", steps, "timed steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup)->check(CLI::NonNegativeNumber);
  app.add_option("--global-batch", global_batch)->check(CLI::PositiveNumber);
  app.add_option("--arch", arch);
  app.add_option("--segment-bytes", segment_bytes, "payload per message (0: automatic)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--transport", transport,
                 "ring transport: tcp or unix (see strata-bench-allreduce)")
      ->check(CLI::IsMember({"tcp", "unix"}));
  app.add_option("--rank", rank, "internal: run one rank")->group("");
  app.add_option("--dir", dir, "internal: port exchange directory")->group("");
  CLI11_PARSE(app, argc, argv);
  if (global_batch % world != 0) {
    std::fprintf(stderr, "--global-batch %d is not divisible by --world %d\n", global_batch, world);
    return 2;
  }
  if (world == 1)
    return RunRank(0, 1, arch, global_batch, steps, warmup, segment_bytes, transport, "");
  if (rank >= 0)
    return RunRank(rank, world, arch, global_batch, steps, warmup, segment_bytes, transport, dir);
  return strata::bench::RunRanks(
      std::filesystem::read_symlink("/proc/self/exe").string(), world,
      {"--world", std::to_string(world), "--steps", std::to_string(steps), "--warmup",
       std::to_string(warmup), "--global-batch", std::to_string(global_batch), "--arch", arch,
       "--segment-bytes", std::to_string(segment_bytes), "--transport", transport},
      std::chrono::seconds(1800));
}
