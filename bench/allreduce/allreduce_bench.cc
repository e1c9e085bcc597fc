// strata-bench-allreduce: ring all-reduce between N processes on loopback, measured the way
// ../shared/peers/gloo_allreduce.py measures gloo: a few warm-up operations, a barrier, ITERS
// operations, a barrier; time per operation, algbw = bytes / time, busbw = algbw * 2(n-1)/n
// (the nccl-tests definition). Last line: busbw_MBps=<value>.
//
// Without --rank it starts all N ranks itself on 127.0.0.1. With --rank, --dir and --host it runs
// one rank that listens on --host: started once per emulated host, each inside its own network
// namespace (bench/network/compare_gloo_emulated.sh), the ranks meet through the directory, which
// they share because namespaces split the network, not the file system. Ranks started that way
// authenticate with the same STRATA_RUN_TOKEN, which the caller puts in their environment.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/allreduce/rank_launcher.h"
#include "services/collective/ring_allreduce.h"
#include "services/common/wire/rpc.h"

namespace {

int RunRank(int rank, int world, size_t floats, int iters, int warmup, size_t segment_bytes,
            const std::string& transport, const std::string& dir, const std::string& host) {
  strata::bench::DieWithParent();
  auto made = strata::bench::MakeRing(rank, transport, host);
  if (!made.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, made.status().ToString().c_str());
    return 1;
  }
  strata::RingAllReduce& ring = **made;
  std::unique_ptr<grpc::Server> server;
  absl::Status status = strata::bench::JoinRing(&ring, transport, dir, rank, world,
                                                std::chrono::seconds(60), &server, host);
  strata::AllReduceOptions options;
  options.deadline = std::chrono::seconds(60);
  options.segment_bytes = segment_bytes;
  std::vector<float> data(floats, 1.0f);
  float token = 0;
  const auto barrier = [&] { return ring.AllReduceAverage(&token, 1, options); };
  for (int i = 0; i < warmup && status.ok(); ++i)
    status = ring.AllReduceAverage(data.data(), floats, options);
  if (status.ok()) status = barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters && status.ok(); ++i)
    status = ring.AllReduceAverage(data.data(), floats, options);
  if (status.ok()) status = barrier();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
  if (!status.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, status.ToString().c_str());
    return 1;
  }
  if (rank == 0) {
    const double bytes = static_cast<double>(floats) * sizeof(float);
    const double algbw = bytes / secs / 1e6;
    const double busbw = algbw * 2.0 * (world - 1) / world;
    std::printf(
        "strata world=%d transport=%s bytes=%.0f segment_bytes=%zu ms_per_op=%.2f "
        "algbw_MBps=%.0f busbw_MBps=%.0f\n",
        world, transport.c_str(), bytes,
        segment_bytes > 0 ? segment_bytes : strata::AutoSegmentBytes(floats, world), secs * 1e3,
        algbw, busbw);
    std::printf("busbw_MBps=%.0f\n", busbw);
    std::fflush(stdout);
  }
  strata::bench::LeaveRank(std::move(server), std::move(*made));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Ring all-reduce bandwidth between N processes on loopback"};
  int world = 2, iters = 20, warmup = 3, rank = -1;
  size_t floats = 1 << 20, segment_bytes = strata::AllReduceOptions{}.segment_bytes;
  std::string dir, transport = "tcp", host = "127.0.0.1";
  app.add_option("--world", world, "ranks (processes)")->check(CLI::Range(1, 64));
  app.add_option("--transport", transport,
                 "tcp: gRPC over loopback TCP (as between machines); unix: gRPC over abstract "
                 "Unix sockets (the local launcher's default); plain-tcp: the TCP link "
                 "(segments on plain TCP, gRPC only to find the peer)")
      ->check(CLI::IsMember({"tcp", "unix", "plain-tcp"}));
  app.add_option("--floats", floats, "floats per rank")->check(CLI::PositiveNumber);
  app.add_option("--iters", iters, "timed operations")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed operations first")->check(CLI::NonNegativeNumber);
  app.add_option("--segment-bytes", segment_bytes, "payload per message (0: automatic)")
      ->check(CLI::NonNegativeNumber);
  auto* rank_option = app.add_option("--rank", rank, "run only this rank (0..world-1); needs --dir")
                          ->check(CLI::NonNegativeNumber);
  app.add_option("--dir", dir,
                 "with --rank: the directory where the ranks publish their addresses (empty at "
                 "the start, the same for every rank)")
      ->needs(rank_option);
  app.add_option("--host", host,
                 "with --rank: the address this rank listens on and publishes (its host's "
                 "address)")
      ->needs(rank_option);
  CLI11_PARSE(app, argc, argv);

  if (rank >= 0) {
    if (rank >= world || dir.empty()) {
      std::fprintf(stderr, "--rank must be below --world (%d) and comes with --dir\n", world);
      return 2;
    }
    return RunRank(rank, world, floats, iters, warmup, segment_bytes, transport, dir, host);
  }
  if (world == 1) {
    // Nothing to exchange; report the trivial operation so scripts still get a line.
    std::printf(
        "strata world=1 bytes=%zu ms_per_op=0.00 algbw_MBps=inf busbw_MBps=0\nbusbw_MBps=0\n",
        floats * sizeof(float));
    return 0;
  }
  return strata::bench::RunRanks(
      std::filesystem::read_symlink("/proc/self/exe").string(), world,
      {"--world", std::to_string(world), "--floats", std::to_string(floats), "--iters",
       std::to_string(iters), "--warmup", std::to_string(warmup), "--segment-bytes",
       std::to_string(segment_bytes), "--transport", transport},
      std::chrono::seconds(600));
}
