// What each container of a job runs when the job is rendered for containers (`strata render`,
// docs/deploy.md): the sharder as a one-shot step, the parameter servers, the workers, the
// evaluator and the orchestrator's supervising process, each as a POSIX shell script for
// `/bin/sh -c`. The role flags come from the same service plan the local launcher uses
// (service_plan.h); this file only adds what containers change: a fixed port on every address
// (each container has its own network namespace), peers named by DNS, the run directory and the
// job spec at fixed paths and the run token from the launcher's secret. What the job learns while
// it runs (the training-set size) the services read from the shared run directory, as they do
// locally. Pure: builds text from the resolved job alone.
#pragma once

#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "strata/v1/job.pb.h"

namespace strata {

inline constexpr int kContainerPort = 50051;
// The user the image runs its processes as (docker/Dockerfile: `useradd --uid 10001`).
inline constexpr int kImageUid = 10001;
inline constexpr char kContainerRunDir[] = "/run/strata";
inline constexpr char kContainerJobSpec[] = "/etc/strata/job.yaml";
// The user's own files (model.torchscript, the .npy files of dataset.name npy), read-only:
// compose binds them from the machine that renders; Kubernetes mounts the claim
// KubernetesNames::inputs() here, which the user fills (docs/deploy.md, "Your own model and
// data").
inline constexpr char kContainerInputsDir[] = "/inputs";
inline constexpr char kContainerModel[] = "/inputs/model.pt";
inline constexpr char kContainerData[] = "/inputs/data";
// security.tls on compose with the user's own security.tls_dir, bound read-only. Without one, the
// one-shot step makes the run's certificates in the run volume (RunPaths::tls), before anything
// reads them.
inline constexpr char kContainerUserTlsDir[] = "/inputs/tls";
// Written by the one-shot step (`strata resolve`) before the shards; every service reads it.
inline constexpr char kContainerResolvedJob[] = "/run/strata/job.resolved.txtpb";
inline constexpr char kComposeTokenFile[] = "/run/secrets/strata_run_token";
// The probe every image must ship: `strata-health HOST:PORT` exits 0 when the gRPC health
// service (grpc.health.v1.Health) at that address answers SERVING.
inline constexpr char kHealthProbe[] = "strata-health";

enum class ContainerRole { kSharder, kParameterServer, kWorker, kEvaluator, kOrchestrator };

struct ContainerSpec {
  // Compose: the service ("ps-0", "worker-1"); Kubernetes: the role's template ("ps", "worker").
  std::string name;
  ContainerRole role = ContainerRole::kWorker;
  // POSIX sh for `/bin/sh -c`, before the launcher's own `$` escaping.
  std::string script;
  bool serves = false;        // listens on kContainerPort; answers the gRPC health check
  bool uses_run_dir = false;  // mounts the shared run directory at kContainerRunDir
  bool needs_token = false;   // makes or takes gRPC calls of the run
  double cpus = 0;            // CPU limit in cores; 0: none
  std::string note;           // what a reader of the rendered file should know, or empty
  // Serves Prometheus metrics on this port at 0.0.0.0 (metrics.enabled, metrics.port); 0: none.
  int metrics_port = 0;
};

// The object names of a job on Kubernetes, from the job's name (DNS-1123 labels).
struct KubernetesNames {
  std::string prefix;                                // the job's name, lower-case, [a-z0-9-]
  std::string ps() const { return prefix + "-ps"; }  // Indexed Job + headless Service
  std::string workers() const { return prefix + "-worker"; }             // Indexed Job
  std::string ring() const { return prefix + "-workers"; }               // headless Service
  std::string evaluator() const { return prefix + "-evaluator"; }        // Pod + Service
  std::string orchestrator() const { return prefix + "-orchestrator"; }  // Job
  std::string run_volume() const { return prefix + "-run"; }             // PersistentVolumeClaim
  std::string job_spec() const { return prefix + "-job-spec"; }          // ConfigMap
  std::string topology() const { return prefix + "-topology"; }  // ConfigMap (replica counts)
  std::string token() const { return prefix + "-run-token"; }    // Secret
  std::string inputs() const { return prefix + "-inputs"; }      // the user's claim, read-only
};

// InvalidArgument when nothing of the name is left for a DNS label.
absl::StatusOr<KubernetesNames> MakeKubernetesNames(const std::string& job_name);

// One of the user's own files as the containers see it.
struct UserInput {
  std::string host_path;       // as the job spec names it, made absolute
  std::string container_path;  // under kContainerInputsDir
};

struct ContainerPlan {
  v1::ResolvedJob job;   // as the containers see it: launcher.kind set, the ring over TCP
  std::string job_yaml;  // that job as YAML, mounted at kContainerJobSpec
  // The user's model and data, when the job has them (every container may read them).
  std::vector<UserInput> inputs;
  // The sharder, the servers, the workers, the evaluator, the orchestrator, in that order.
  std::vector<ContainerSpec> containers;
};

// Compose: one container per instance, peers by service name, the token from the compose secret.
ContainerPlan PlanComposeContainers(const v1::ResolvedJob& job);

// Kubernetes: one template per role. Replica counts come from $STRATA_WORKERS and
// $STRATA_PARAMETER_SERVERS (the topology ConfigMap, so that an overlay can change them in one
// place), the rank and the partition from $JOB_COMPLETION_INDEX (workers and servers are Indexed
// Jobs), the token from the Secret through the environment.
ContainerPlan PlanKubernetesContainers(const v1::ResolvedJob& job, const KubernetesNames& names);

// The flags whose values differ between instances of one role, and what the Kubernetes templates
// put there instead; a test checks that the service plan has no other per-instance flag.
struct TemplatedFlag {
  ContainerRole role;
  std::string flag;
};
const std::vector<TemplatedFlag>& KubernetesTemplatedFlags();

// `word` for a POSIX shell: as is when safe, double-quoted when it holds a `$` expansion of ours,
// else single-quoted.
std::string ShellWord(const std::string& word);

// The health probe as a container runs it against its own service: `strata-health` on the
// container's port, a client of the run's CA with the job's TLS mode when security.tls is on (a
// service under TLS speaks nothing else, and Kubernetes' own gRPC probes speak no TLS).
std::vector<std::string> HealthProbeCommand(const v1::ResolvedJob& job);

// A CPU quantity as Kubernetes writes it: "2", "500m".
std::string CpuQuantity(double cpus);

}  // namespace strata
