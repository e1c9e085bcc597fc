// The job spec (docs/job-spec.md): one validated YAML file instead of scattered flags. Every
// problem is reported as "FILE:LINE: key: what" (or "(from --set KEY=VALUE): key: what" when an
// override brought the value); unknown keys, duplicate keys, keys without a value, non-finite
// numbers and an empty file are errors, so a typo never silently falls back to a default.
// docs/job-spec.md documents every key.
#pragma once

#include <cstdint>
#include <map>
#include <set>
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
  std::string arch = "mlp";  // mlp | mlp_wide | cnn | resnet20 | resnet32 | resnet56
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

// CPU quotas by role, in cores (0.5 = half of one core); 0: no quota.
struct CpuSharesSpec {
  double worker = 0, parameter_server = 0, evaluator = 0;
};

struct ClusterSpec {
  int workers = 2;
  int parameter_servers = 1;
  int threads_per_worker = 1;
  std::vector<StragglerSpec> stragglers;
  CpuSharesSpec cpu;
  // Relative speeds, one per worker: worker r gets cpu.worker x worker_speeds[r] cores. Empty:
  // every worker gets cpu.worker.
  std::vector<double> worker_speeds;
};

// The cores worker `rank`'s quota allows: its straggler entry if it has one, else cpu.worker
// times its speed; 0 means no quota.
double WorkerCpuShare(const ClusterSpec& cluster, int rank);

struct ShardingSpec {
  std::string method = "stratified";  // random | mod | stratified | distribution-aware
  int clusters = 20;
  int pca_components = 50;
  int max_iterations = 150;
};

struct StrategySpec {
  std::string kind = "allreduce";   // allreduce | ps | switch
  std::string consistency = "asp";  // ps: asp | bsp | ssp | pdp | apdp
  int staleness = 3;                // ssp
  // pdp, apdp: the global mini-batch K* in points, all workers together; 0: searched while
  // training, from k_star_start (0: a quarter of the probe window), each candidate probed over
  // probe_ratio x the training points (at least 4 K*).
  int k_star = 0;
  int k_star_start = 0;
  double probe_ratio = 0.05;
  std::string rule = "empirical";  // switch: empirical | at_fraction
  double at_fraction = 0.3;
  int window = 5;
  double threshold_percent = 1.0;
  double ps_lr_scale = 0.0;  // per-worker lr after the switch = lr * scale; 0 = 1 / workers
  // Push/pull exchanges that may travel while the worker computes the next step: 0 or 1 (each
  // adds at most one version of staleness to the worker's gradients).
  int ps_pipeline = 0;
  // All-reduce: > 0 averages the gradients in buckets of about this many MB while backward runs
  // (services/worker/bucket_reduction.h); 0 in one operation after backward.
  double bucket_mb = 0;
  // How the ring's segments travel: "tcp" (one plain TCP connection per neighbour, gRPC only to
  // find it; services/worker/tcp_ring_link.h) or "grpc" (a gRPC stream per operation). With TLS
  // on, the ring stays on gRPC (the TCP connection is not encrypted).
  std::string ring_link = "tcp";
  // How the per-step push/pull travels: "tcp" (one plain TCP connection per worker and server,
  // gRPC only to find it; services/parameter_server/tcp_push_pull_server.h), "shm" (the same
  // connection, with the tensors in a shared-memory region when worker and server share a host;
  // services/common/wire/shared_region.h) or "grpc" (a gRPC stream per step). With TLS on,
  // push/pull stays on gRPC.
  std::string ps_link = "shm";
};

struct LauncherSpec {
  std::string kind = "local";  // local | compose | kubernetes
  // local: how the workers' ring all-reduce traffic travels between processes of one machine.
  // "unix": gRPC over abstract Unix sockets (no TCP/IP stack: 10-18% more ring bandwidth here,
  // docs/benchmarks.md); "tcp": gRPC over loopback TCP, as between machines.
  std::string ring_transport = "unix";  // unix | tcp
};

// What `strata run` does when a service dies mid-run (docs/user-guide.md, "When a process dies").
struct RecoverySpec {
  // Times each worker or parameter server may be restarted; 0: a dead process ends the run.
  int restarts = 3;
  // Each parameter server saves its partition this often (seconds) and a restarted one resumes
  // from that save: the updates a crash loses are those of at most this long.
  double server_checkpoint_s = 10;
  // Worker 0 saves the all-reduce model this often (seconds) while the ring trains: where
  // `strata resume` continues an all-reduce run (or a switch job before its switch). 0: never.
  double ring_checkpoint_s = 10;
};

// Transport security between the run's processes (docs/security.md, "Transport security").
struct SecuritySpec {
  std::string tls = "off";  // off | on | mutual (services/common/wire/tls.h)
  // ca.pem, server.pem, server.key (and, mutual, client.pem, client.key). Empty: `strata run`
  // makes a CA and certificates of the run's own in <run>/tls.
  std::string tls_dir;
  std::string tls_server_name = "strata";  // the name clients verify in server.pem
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
  RecoverySpec recovery;
  SecuritySpec security;
};

const std::vector<std::string>& KnownModelArchs();

// Everything the parser learned from one job spec, for callers that check more than the schema
// (orchestrator/lib/job_checks.h): they must blame the same places and skip checks whose inputs
// were already refused, so that one mistake is reported once, not again as its consequences.
struct JobSpecReading {
  std::string origin;  // the file path (or what stands for it) in messages
  JobSpec spec;        // accepted values; the default wherever a key is absent or was refused
  std::vector<std::string> errors;  // every problem, in the order found, one line each
  // Dotted keys whose values were refused ("training.lr", "cluster.stragglers[0].worker"); an
  // unknown key is an error but refuses no value.
  std::set<std::string> refused;
  // Every key present after --set, dotted, to its place: "FILE:LINE" or "(from --set K=V)".
  std::map<std::string, std::string> sources;
  // False when the text is not YAML, is empty, or is not a mapping: nothing in `spec` came from it.
  bool mapping_read = false;

  // The place to blame for `key`: its own source, else that of the nearest enclosing section in
  // the file, else `origin` alone (a default the file never mentions).
  std::string Where(const std::string& key) const;
  // True if `key`, a key inside it or a section around it was refused.
  bool Refused(const std::string& key) const;
};

// `origin` names the text in messages (usually the file path). `overrides` are "a.b=value"
// settings (from `--set`) applied before validation, so they are checked like the file.
JobSpecReading ReadJobSpec(const std::string& yaml_text, const std::string& origin,
                           const std::vector<std::string>& overrides = {});

// ReadJobSpec as a Status: InvalidArgument with every error, one per line.
absl::StatusOr<JobSpec> ParseJobSpec(const std::string& yaml_text, const std::string& origin,
                                     const std::vector<std::string>& overrides = {});
absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path,
                                    const std::vector<std::string>& overrides = {});

// The resolved spec, defaults filled in, as YAML (written to the run directory).
std::string JobSpecToYaml(const JobSpec& spec);

}  // namespace strata
