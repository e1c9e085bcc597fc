// strata-bench-allreduce-train: data-parallel training throughput with the ring all-reduce
// synchroniser, N processes on loopback, set up like ../shared/peers/ddp_train.py: ResNet-20 on
// random 28x28x1 inputs, global batch 128 (128/N per process), SGD lr 0.1 momentum 0.9,
// max(1, 2/N) threads per process, 3 warm-up steps. Last line: samples_per_s=<value>.
// With --rank, --dir and --host it runs one rank listening on --host, as strata-bench-allreduce
// does: started once per emulated host (bench/network/compare_ddp_emulated.sh).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

#include <absl/strings/str_cat.h>
#include <CLI/CLI.hpp>

#include "bench/allreduce/rank_launcher.h"
#include "bench/common/bench_trainer.h"
#include "services/common/wire/rpc.h"
#include "services/worker/allreduce_sync.h"

namespace {

int Fail(int rank, const absl::Status& status) {
  std::fprintf(stderr, "rank %d: %s\n", rank, status.ToString().c_str());
  return 1;
}

struct RunOptions {
  int world = 2, steps = 20, warmup = 3, global_batch = 128;
  std::string arch = "resnet20", transport = "tcp";
  size_t segment_bytes = strata::AllReduceOptions{}.segment_bytes;
  double bucket_mb = 0;
  std::string dir;                 // port exchange between the ranks
  std::string host = "127.0.0.1";  // where this rank listens and which address it publishes
};

int RunRank(int rank, const RunOptions& o) {
  const int world = o.world, steps = o.steps, warmup = o.warmup, global_batch = o.global_batch;
  const std::string& arch = o.arch;
  const int batch = global_batch / world;
  const int threads = std::max(1, 2 / world);
  auto trainer = strata::bench::MakeBenchTrainer(arch, batch, threads, /*data_seed=*/1 + rank);
  if (!trainer.ok()) return Fail(rank, trainer.status());

  std::unique_ptr<strata::RingAllReduce> ring;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<strata::Synchroniser> sync;
  if (world > 1) {
    strata::bench::DieWithParent();
    auto made_ring = strata::bench::MakeRing(rank, o.transport, o.host);
    if (!made_ring.ok()) return Fail(rank, made_ring.status());
    ring = std::move(*made_ring);
    if (absl::Status s = strata::bench::JoinRing(ring.get(), o.transport, o.dir, rank, world,
                                                 std::chrono::seconds(120), &server, o.host);
        !s.ok()) {
      return Fail(rank, s);
    }
    strata::AllReduceSyncOptions options;
    options.ring.deadline = std::chrono::seconds(120);
    options.ring.segment_bytes = o.segment_bytes;
    options.bucket_bytes = static_cast<size_t>(o.bucket_mb * (1 << 20));
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
        "strata-allreduce world=%d arch=%s global_batch=%d threads=%d steps=%d bucket_mb=%g "
        "sync_share=%.1f%% samples_per_s=%.0f\n",
        world, arch.c_str(), global_batch, threads, steps, o.bucket_mb, 100.0 * comm_s / secs,
        static_cast<double>(global_batch) * steps / secs);
    std::fflush(stdout);
  }
  sync.reset();  // before the ring it uses
  strata::bench::LeaveRank(std::move(server), std::move(ring));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"All-reduce training throughput, N processes on loopback"};
  RunOptions o;
  int rank = -1;
  app.add_option("--world", o.world, "processes")->check(CLI::Range(1, 64));
  app.add_option("--steps", o.steps, "timed steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup)->check(CLI::NonNegativeNumber);
  app.add_option("--global-batch", o.global_batch)->check(CLI::PositiveNumber);
  app.add_option("--arch", o.arch);
  app.add_option("--segment-bytes", o.segment_bytes, "payload per message (0: automatic)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--transport", o.transport,
                 "ring transport: tcp, unix or plain-tcp (see strata-bench-allreduce)")
      ->check(CLI::IsMember({"tcp", "unix", "plain-tcp"}));
  app.add_option("--bucket-mb", o.bucket_mb,
                 "reduce gradients in buckets of this many MB while backward runs (0: after it)")
      ->check(CLI::Range(0.0, 1024.0));
  app.add_option("--rank", rank, "internal: run one rank")->group("");
  app.add_option("--dir", o.dir, "internal: port exchange directory")->group("");
  app.add_option("--host", o.host,
                 "with --rank: the address this rank listens on and publishes (its host's on an "
                 "emulated network)");
  CLI11_PARSE(app, argc, argv);
  if (o.global_batch % o.world != 0) {
    std::fprintf(stderr, "--global-batch %d is not divisible by --world %d\n", o.global_batch,
                 o.world);
    return 2;
  }
  if (o.world == 1 || rank >= 0) return RunRank(std::max(rank, 0), o);
  return strata::bench::RunRanks(
      std::filesystem::read_symlink("/proc/self/exe").string(), o.world,
      {"--world", std::to_string(o.world), "--steps", std::to_string(o.steps), "--warmup",
       std::to_string(o.warmup), "--global-batch", std::to_string(o.global_batch), "--arch", o.arch,
       "--segment-bytes", std::to_string(o.segment_bytes), "--transport", o.transport,
       "--bucket-mb", absl::StrCat(o.bucket_mb)},
      std::chrono::seconds(1800));
}
