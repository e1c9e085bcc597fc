// strata-train: the single-process reference trainer. Same data, model and optimizer code as the
// distributed workers, so its curves are the baseline the cluster runs are compared with.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <absl/strings/str_format.h>
#include <CLI/CLI.hpp>

#include "services/common/base/files.h"
#include "services/common/base/metrics.h"
#include "services/common/config/job_keys.h"
#include "services/common/config/job_spec.h"
#include "services/common/config/resolved_job.h"
#include "services/common/ml/dataset.h"
#include "services/common/ml/trainer.h"
#include "services/common/process/progress.h"

namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "strata-train: %s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Strata single-process reference trainer"};
  std::string config, out_dir;
  int epochs = 0, threads = -1;
  std::vector<std::string> overrides;
  bool quiet = false;
  app.add_option("--config", config, "job spec (YAML)")->required()->check(CLI::ExistingFile);
  app.add_option("--out", out_dir, "output directory (metrics.jsonl, job.yaml, summary.json)")
      ->required();
  app.add_option("--epochs", epochs, "override training.epochs")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "override training.threads (0 = all cores)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--set", overrides, "override a job-spec key, e.g. --set training.lr=0.05");
  app.add_flag("--quiet", quiet, "print only the final line");
  CLI11_PARSE(app, argc, argv);

  if (epochs > 0) overrides.push_back("training.epochs=" + std::to_string(epochs));
  if (threads >= 0) overrides.push_back("training.threads=" + std::to_string(threads));
  auto spec = strata::LoadJobSpec(config, overrides);
  if (!spec.ok()) return Fail(spec.status());

  auto dataset = strata::LoadDataset(strata::DatasetOptionsFor(*spec));
  if (!dataset.ok()) return Fail(dataset.status());
  auto shared_dataset = std::make_shared<const strata::Dataset>(std::move(*dataset));

  const int used_threads = strata::ConfigureTorchThreads(spec->training().threads());
  auto trainer =
      strata::Trainer::Create(strata::TrainerOptions::ForSingleProcess(*spec), shared_dataset);
  if (!trainer.ok()) return Fail(trainer.status());

  if (absl::Status s = strata::MakeDirs(out_dir); !s.ok()) return Fail(s);
  const std::string metrics_path = out_dir + "/metrics.jsonl";
  std::remove(metrics_path.c_str());  // a fresh run replaces earlier results in this directory
  if (absl::Status s = strata::WriteFileAtomic(out_dir + "/job.yaml", strata::JobSpecYaml(*spec));
      !s.ok()) {
    return Fail(s);
  }
  auto metrics = strata::JsonLinesWriter::Open(metrics_path);
  if (!metrics.ok()) return Fail(metrics.status());

  const strata::Dataset& d = *shared_dataset;
  if (!quiet) {
    std::printf(
        "strata-train: %s — %s (%lld parameters) on %s (%zu train / %zu test), batch %d, %d "
        "thread%s\n",
        spec->name().c_str(), strata::ModelText(*spec).c_str(),
        static_cast<long long>((*trainer)->parameter_count()), d.name.c_str(), d.train.size(),
        d.test.size(), static_cast<int>(spec->training().global_batch()), used_threads,
        used_threads == 1 ? "" : "s");
    std::fflush(stdout);
  }
  strata::ProgressLine progress(!quiet);
  const auto start = std::chrono::steady_clock::now();
  const int total_epochs = spec->training().epochs();
  strata::EpochResult last;
  for (int epoch = 0; epoch < total_epochs; ++epoch) {
    auto result = (*trainer)->TrainEpoch(epoch, [&](int64_t step, int64_t steps, double loss) {
      if (step % 10 != 0 && step != steps) return;
      progress.Update(absl::StrFormat("epoch %d/%d %s %lld/%lld  train_loss %.4f", epoch + 1,
                                      total_epochs, strata::Bar(double(step) / steps, 24),
                                      static_cast<long long>(step), static_cast<long long>(steps),
                                      loss));
    });
    progress.Clear();
    if (!result.ok()) return Fail(result.status());
    const double wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    last = *result;
    absl::Status s = (*metrics)->Write({{"epoch", result->epoch},
                                        {"phase", "single"},
                                        {"lr", result->lr},
                                        {"train_loss", result->train_loss},
                                        {"train_acc", result->train_acc},
                                        {"val_loss", result->val_loss},
                                        {"val_acc", result->val_acc},
                                        {"samples_per_s", result->samples_per_s},
                                        {"wall_s", wall_s}});
    if (!s.ok()) return Fail(s);
    if (!quiet) {
      std::printf(
          "epoch %2lld/%d  lr %.4g  train_loss %.4f  val_loss %.4f  val_acc %.4f  %6.0f samples/s  "
          "%.1f s\n",
          static_cast<long long>(result->epoch), total_epochs, result->lr, result->train_loss,
          result->val_loss, result->val_acc, result->samples_per_s, wall_s);
      std::fflush(stdout);
    }
  }
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  nlohmann::json summary = {{"name", spec->name()},
                            {"arch", strata::ModelText(*spec)},
                            {"epochs", total_epochs},
                            {"final_val_acc", last.val_acc},
                            {"final_val_loss", last.val_loss},
                            {"final_train_loss", last.train_loss},
                            {"wall_s", wall_s},
                            {"threads", used_threads}};
  if (absl::Status s = strata::WriteFileAtomic(out_dir + "/summary.json", summary.dump(2) + "\n");
      !s.ok()) {
    return Fail(s);
  }
  std::printf("done: %d epochs in %.1f s, final val_acc %.4f, val_loss %.4f; results in %s\n",
              total_epochs, wall_s, last.val_acc, last.val_loss, out_dir.c_str());
  return 0;
}
