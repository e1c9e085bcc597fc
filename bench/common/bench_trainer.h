// The Trainer the throughput benchmarks time (strata-bench-train, strata-bench-allreduce-train):
// the set-up of ../shared/peers/ddp_train.py — SGD with lr 0.1 and momentum 0.9 on `batch` random
// 28x28x1 images of 10 classes — so that the figures compare the training step and nothing else.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <absl/status/statusor.h>

#include "services/common/config/job_keys.h"
#include "services/common/ml/dataset.h"
#include "services/common/ml/trainer.h"

namespace strata::bench {

inline absl::StatusOr<std::unique_ptr<Trainer>> MakeBenchTrainer(const std::string& arch, int batch,
                                                                 int threads, uint64_t data_seed) {
  ConfigureTorchThreads(threads);
  TrainerOptions o;
  o.arch = EnumFromSpelling<v1::ModelArch>(arch).value_or(v1::MODEL_ARCH_UNSPECIFIED);
  o.batch_size = batch;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.seed = 1;
  return Trainer::Create(
      o, std::make_shared<const Dataset>(MakeRandomImageDataset(batch, 1, 28, 28, 10, data_seed)));
}

}  // namespace strata::bench
