// The run directory (docs/user-guide.md, "The run directory"): every file a run writes, named here
// and nowhere else. The services name files relative to the run directory (they are handed it as
// --run-dir, or see it mounted elsewhere in a container); the orchestrator holds the absolute
// paths (RunPaths). A shard plan directory written outside a run (`strata shard --out DIR`) has
// the same two names as a run's shards/ (kShardManifestName, ShardIndexName). A Kubernetes
// submission's directory has names of its own (SubmissionPaths, below).
#pragma once

#include <cstdint>
#include <string>

namespace strata {

// The sharder's plan: a manifest and one index per worker, in the plan directory.
inline constexpr char kShardManifestName[] = "manifest.json";
// `rank` may be a shell expansion in a container's script ("${JOB_COMPLETION_INDEX}").
inline std::string ShardIndexName(const std::string& rank) { return "shard-" + rank + ".idx"; }
inline std::string ShardIndexName(int rank) { return ShardIndexName(std::to_string(rank)); }

// Relative to the run directory.
namespace run_files {
inline constexpr char kJobYaml[] = "job.yaml";
inline constexpr char kJobResolved[] = "job.resolved.txtpb";
inline constexpr char kShards[] = "shards";
inline constexpr char kShardManifest[] = "shards/manifest.json";
inline constexpr char kCheckpoints[] = "checkpoints";
// Where rank 0 of a ring saves the all-reduce model for `strata resume`.
inline constexpr char kRingCheckpoint[] = "checkpoints/ring.ckpt";
// The servers' first model in a job that starts on the parameter servers.
inline constexpr char kInitCheckpoint[] = "checkpoints/init.ckpt";
// The model the evaluator scored last at the end of training (`strata export` writes it back into
// a user's TorchScript module).
inline constexpr char kFinalCheckpoint[] = "checkpoints/final.ckpt";
// A user's TorchScript model, copied into the run when it starts: the run trains, resumes and
// exports the file it started with, whatever happens to the original.
inline constexpr char kModel[] = "model.pt";
// Where partition 0's server records the rounds of a pdp or apdp job (one JSON line each).
inline constexpr char kPdpRounds[] = "pdp-rounds.jsonl";
// A stream job's replicas: what each reports while it trains (rewritten about once a second) and
// at its end, and its final model.
inline constexpr char kStream[] = "stream";
inline std::string StreamReplicaProgress(int rank) {
  return std::string(kStream) + "/replica-" + std::to_string(rank) + ".progress.json";
}
inline std::string StreamReplicaResult(int rank) {
  return std::string(kStream) + "/replica-" + std::to_string(rank) + ".json";
}
inline std::string StreamReplicaModel(int rank) {
  return std::string(kCheckpoints) + "/replica-" + std::to_string(rank) + ".ckpt";
}
inline std::string ShardIndex(const std::string& rank) {
  return std::string(kShards) + "/" + ShardIndexName(rank);
}
inline std::string ShardIndex(int rank) { return ShardIndex(std::to_string(rank)); }
// The model handed over at a switch, saved by worker 0 at the switch step.
inline std::string SwitchCheckpoint(int64_t step) {
  return std::string(kCheckpoints) + "/switch-step" + std::to_string(step) + ".ckpt";
}
// Partition `p`'s periodic save, which a restarted server and a resumed run start from.
inline std::string ServerCheckpoint(int partition) {
  return std::string(kCheckpoints) + "/ps-" + std::to_string(partition) + ".ckpt";
}
}  // namespace run_files

// The absolute paths of one run's files.
struct RunPaths {
  explicit RunPaths(std::string dir)
      : root(std::move(dir)),
        job_yaml(At(run_files::kJobYaml)),
        job_resolved(At(run_files::kJobResolved)),
        shards(At(run_files::kShards)),
        checkpoints(At(run_files::kCheckpoints)),
        logs(At("logs")),
        ports(At("ports")),
        metrics(At("metrics.jsonl")),
        events(At("events.jsonl")),
        summary(At("summary.json")),
        report(At("report.html")),
        status(At("status.json")),
        switch_request(At("switch.request")),
        pdp_rounds(At(run_files::kPdpRounds)),
        tls(At("tls")) {}

  // `relative` (one of run_files) under this run's directory.
  std::string At(const std::string& relative) const { return root + "/" + relative; }
  std::string ShardIndex(int rank) const { return At(run_files::ShardIndex(rank)); }
  std::string ShardManifest() const { return At(run_files::kShardManifest); }
  std::string SwitchCheckpoint(int64_t step) const { return At(run_files::SwitchCheckpoint(step)); }
  std::string ServerCheckpoint(int partition) const {
    return At(run_files::ServerCheckpoint(partition));
  }
  std::string RingCheckpoint() const { return At(run_files::kRingCheckpoint); }
  std::string StreamReplicaProgress(int rank) const {
    return At(run_files::StreamReplicaProgress(rank));
  }
  std::string StreamReplicaResult(int rank) const { return At(run_files::StreamReplicaResult(rank)); }
  std::string StreamReplicaModel(int rank) const { return At(run_files::StreamReplicaModel(rank)); }
  std::string InitCheckpoint() const { return At(run_files::kInitCheckpoint); }
  // ports/<service>.port: where a service started by the local launcher writes its port.
  std::string PortFile(const std::string& service) const { return ports + "/" + service + ".port"; }
  // ports/<service>.metrics.port: the port a service's /metrics endpoint took.
  std::string MetricsPortFile(const std::string& service) const {
    return ports + "/" + service + ".metrics.port";
  }
  // ports/orchestrator.metrics.port: the port the orchestrator's own /metrics took (`strata run`
  // and `strata resume`, with metrics.enabled).
  std::string OrchestratorMetricsPortFile() const { return MetricsPortFile("orchestrator"); }
  // logs/<service>.log: a service's output.
  std::string ServiceLog(const std::string& service) const { return logs + "/" + service + ".log"; }

  std::string root;
  std::string job_yaml;  // the job as YAML, every key written out
  // The resolved job every service reads (services/common/config/resolved_job.h).
  std::string job_resolved;
  std::string shards;          // manifest.json + shard-<rank>.idx
  std::string checkpoints;     // switch-step<S>.ckpt, init.ckpt, ps-<p>.ckpt, ring.ckpt
  std::string logs;            // one log per service
  std::string ports;           // port files of the services and the orchestrator's metrics
  std::string metrics;         // one line per evaluation
  std::string events;          // launches, switch, failures
  std::string summary;         // written when the run ends
  std::string report;          // charts
  std::string status;          // live state, rewritten about once a second while running
  std::string switch_request;  // `strata switch` drops it; the running orchestrator acts on it
  std::string pdp_rounds;      // pdp and apdp: partition 0's server records each round
  // security.tls without tls_dir: the run's own CA certificate and the services' certificates and
  // keys (mode 0700), removed when the run ends
  std::string tls;
};

// A Kubernetes submission directory (`strata submit`; by default the run directory's
// kubernetes/): the files `strata render` writes, and these, relative to it.
namespace submission_files {
// The default submission directory's name inside a run directory.
inline constexpr char kInRunDirectory[] = "kubernetes";
// What `strata status`, `logs` and `delete` find the run by (the Job, its UID, the namespace).
inline constexpr char kRecord[] = "submission.json";
// The run token, where the kustomize base's Secret generator expects it.
inline constexpr char kRunToken[] = "base/run-token";
// The objects exactly as created: the orchestrator Job (created suspended), the run volume's
// claim, and everything the Job owns (it holds the Secret, so it is written private and ignored
// by git).
inline constexpr char kSubmitted[] = "submitted";
inline constexpr char kSubmittedJob[] = "submitted/orchestrator-job.yaml";
inline constexpr char kSubmittedRunVolume[] = "submitted/run-volume.yaml";
inline constexpr char kSubmittedOwned[] = "submitted/owned.yaml";
inline constexpr char kSubmittedGitignore[] = "submitted/.gitignore";
// <service>.log of every pod, saved when the run ends.
inline constexpr char kLogs[] = "logs";
}  // namespace submission_files

// The absolute paths of one submission's files.
struct SubmissionPaths {
  explicit SubmissionPaths(std::string dir)
      : root(std::move(dir)),
        record(At(submission_files::kRecord)),
        token(At(submission_files::kRunToken)),
        applied(At(submission_files::kSubmitted)),
        job(At(submission_files::kSubmittedJob)),
        run_volume(At(submission_files::kSubmittedRunVolume)),
        owned(At(submission_files::kSubmittedOwned)),
        logs(At(submission_files::kLogs)) {}

  // `relative` (one of submission_files) under this submission's directory.
  std::string At(const std::string& relative) const { return root + "/" + relative; }

  std::string root;
  std::string record;      // submission_files::kRecord
  std::string token;       // the run token
  std::string applied;     // the objects exactly as created
  std::string job;         // the orchestrator Job
  std::string run_volume;  // the claim
  std::string owned;       // everything the Job owns
  std::string logs;        // the pods' logs
};

}  // namespace strata
