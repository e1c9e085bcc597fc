// strata-bench-train: single-process training throughput of the Trainer on random inputs shaped
// like Fashion-MNIST, the same setup as ../shared/peers/ddp_train.py with world 1 (ResNet-20,
// batch 128, SGD momentum 0.9, random data), so that the two figures compare the training step
// and nothing else. Last line: samples_per_s=<value>.
#include <chrono>
#include <cstdio>

#include <CLI/CLI.hpp>

#include "bench/common/bench_trainer.h"

int main(int argc, char** argv) {
  CLI::App app{"Strata single-process training throughput"};
  std::string arch = "resnet20";
  int steps = 20, batch = 128, threads = 2, warmup = 3;
  app.add_option("--arch", arch);
  app.add_option("--steps", steps)->check(CLI::PositiveNumber);
  app.add_option("--batch", batch)->check(CLI::PositiveNumber);
  app.add_option("--threads", threads)->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  auto trainer = strata::bench::MakeBenchTrainer(arch, batch, threads, /*data_seed=*/1);
  if (!trainer.ok()) {
    std::fprintf(stderr, "%s\n", std::string(trainer.status().message()).c_str());
    return 1;
  }
  (*trainer)->StartEpoch(0);
  const auto sgd = (*trainer)->SgdFor(0);
  std::chrono::steady_clock::time_point start;
  for (int i = 0; i < steps + warmup; ++i) {
    if (i == warmup) start = std::chrono::steady_clock::now();
    if (!(*trainer)->ComputeGradients(0).ok()) return 1;
    (*trainer)->ApplyGradients(sgd);
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("strata arch=%s batch=%d threads=%d steps=%d samples_per_s=%.0f\n", arch.c_str(),
              batch, threads, steps, static_cast<double>(batch) * steps / secs);
  return 0;
}
