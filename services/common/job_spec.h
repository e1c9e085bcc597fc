// The job spec (docs/job-spec.md): one validated YAML file instead of scattered flags. Every problem
// is reported with its key and line; unknown keys are errors, so a typo never silently falls back
// to a default. docs/job-spec.md documents every key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

namespace strata {

struct DatasetSpec {
  std::string name = "fashion-mnist";
  std::string path = "/usr/share/datasets/fashion-mnist";
  std::string label_set = "fine";  // cifar100 only
  int64_t max_train = 0;           // 0 = the whole split
  int64_t max_test = 0;
};

struct ModelSpec {
  std::string arch = "mlp";  // mlp | cnn | resnet20 | resnet32 | resnet56
};

struct LrScheduleSpec {
  std::vector<int> milestones;  // epochs after which lr *= gamma
  double gamma = 0.1;
};

struct TrainingSpec {
  int epochs = 10;
  int batch_size = 128;  // global batch; each of n workers uses batch_size / n
  double lr = 0.1;
  double momentum = 0.9;
  double weight_decay = 0.0;
  LrScheduleSpec lr_schedule;
  uint64_t seed = 1;
  int threads = 0;  // intra-op threads for single-process training; 0 = all cores
};

struct StragglerSpec {
  int worker = 0;
  double cpu_fraction = 1.0;  // share of one core, (0, 1]
};

struct ClusterSpec {
  int workers = 2;
  int parameter_servers = 1;
  int threads_per_worker = 1;
  std::vector<StragglerSpec> stragglers;
};

struct ShardingSpec {
  std::string method = "stratified";  // random | mod | stratified | distribution-aware
  int clusters = 20;
  int pca_components = 50;
  int max_iterations = 150;
};

struct StrategySpec {
  std::string kind = "allreduce";   // allreduce | ps | switch
  std::string consistency = "asp";  // ps: asp | bsp | ssp
  int staleness = 3;                // ssp
  std::string rule = "empirical";   // switch: empirical | at_fraction
  double at_fraction = 0.3;
  int window = 5;
  double threshold_percent = 1.0;
  double ps_lr_scale = 0.0;  // per-worker lr after the switch = lr * scale; 0 = 1 / workers
};

struct LauncherSpec {
  std::string kind = "local";  // local | compose | kubernetes
  // local: how the workers' ring all-reduce traffic travels between processes of one machine.
  // "unix": gRPC over abstract Unix sockets (no TCP/IP stack: 10-18% more ring bandwidth here,
  // docs/benchmarks.md); "tcp": gRPC over loopback TCP, as between machines.
  std::string ring_transport = "unix";  // unix | tcp
};

struct JobSpec {
  std::string name = "job";
  DatasetSpec dataset;
  ModelSpec model;
  TrainingSpec training;
  ClusterSpec cluster;
  ShardingSpec sharding;
  StrategySpec strategy;
  LauncherSpec launcher;
};

const std::vector<std::string>& KnownModelArchs();

// `origin` names the text in messages (usually the file path). `overrides` are "a.b=value"
// settings (from `--set`) applied before validation, so they are checked like the file.
absl::StatusOr<JobSpec> ParseJobSpec(const std::string& yaml_text, const std::string& origin,
                                     const std::vector<std::string>& overrides = {});
absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path,
                                    const std::vector<std::string>& overrides = {});

// The resolved spec, defaults filled in, as YAML (written to the run directory).
std::string JobSpecToYaml(const JobSpec& spec);

}  // namespace strata
