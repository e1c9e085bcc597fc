#include "sharder/shard_flags.h"

namespace strata::shard {
namespace {

// Long names, in the order they are forwarded.
const std::vector<std::string>& FlagNames() {
  static const std::vector<std::string> names = {
      "config",  "job",     "dataset",  "data",           "label-set",      "max-train",
      "workers", "method",  "clusters", "pca-components", "max-iterations", "pca-fit-examples",
      "seed",    "threads", "out"};
  return names;
}

}  // namespace

void AddShardFlags(CLI::App* app, ShardFlags* f) {
  // Positional or --config: `strata shard JOB.yaml --out DIR` reads like the other subcommands.
  app->add_option("--config,job_spec", f->config,
                  "job spec (YAML): dataset, sharding, cluster.workers and training.seed; flags override it");
  app->add_option("--job", f->job,
                  "instead of a job spec: the resolved job `strata` wrote (strata resolve); flags "
                  "override it");
  app->add_option("--dataset", f->dataset, "fashion-mnist | mnist | cifar10 | cifar100 | synthetic");
  app->add_option("--data", f->data, "directory holding the data set files");
  app->add_option("--label-set", f->label_set, "cifar100 labels: fine (100 classes) or coarse (20)");
  app->add_option("--max-train", f->max_train, "use only the first N training examples (0 = all)");
  app->add_option("--workers", f->workers, "number of workers (shards)");
  app->add_option("--method", f->method, "random | mod | stratified | distribution-aware");
  app->add_option("--clusters", f->clusters, "distribution-aware: KMeans neighbourhoods (default 20; paper: 2 x classes)");
  app->add_option("--pca-components", f->pca_components, "distribution-aware: PCA dimensions (default 50)");
  app->add_option("--max-iterations", f->max_iterations, "distribution-aware: at most this many Lloyd steps (default 150)");
  app->add_option("--pca-fit-examples", f->pca_fit_examples,
                  "distribution-aware: fit the PCA on a seeded sample of N examples (0 = all)");
  app->add_option("--seed", f->seed, "seed of the plan (default: training.seed, else 1)");
  app->add_option("--threads", f->threads, "LibTorch threads for PCA/KMeans (0 = all cores)");
  app->add_option("--out", f->out, "plan directory to write (manifest.json + shard-<worker>.idx)");
}

void NoteGivenShardFlags(const CLI::App& app, ShardFlags* flags) {
  flags->given.clear();
  for (const std::string& name : FlagNames()) {
    if (app.count("--" + name) > 0) flags->given.insert(name);
  }
}

std::vector<std::string> ShardFlagsAsArgs(const ShardFlags& f) {
  std::vector<std::string> args;
  auto add = [&](const std::string& name, const std::string& value) {
    if (f.Given(name)) {
      args.push_back("--" + name);
      args.push_back(value);
    }
  };
  add("config", f.config);
  add("job", f.job);
  add("dataset", f.dataset);
  add("data", f.data);
  add("label-set", f.label_set);
  add("max-train", std::to_string(f.max_train));
  add("workers", std::to_string(f.workers));
  add("method", f.method);
  add("clusters", std::to_string(f.clusters));
  add("pca-components", std::to_string(f.pca_components));
  add("max-iterations", std::to_string(f.max_iterations));
  add("pca-fit-examples", std::to_string(f.pca_fit_examples));
  add("seed", std::to_string(f.seed));
  add("threads", std::to_string(f.threads));
  add("out", f.out);
  return args;
}

}  // namespace strata::shard
