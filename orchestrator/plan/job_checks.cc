#include "orchestrator/plan/job_checks.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>

#include "orchestrator/launch/container_plan.h"
#include "orchestrator/run/switch_rule.h"
#include "services/common/base/files.h"
#include "services/common/base/run_directory.h"
#include "services/common/config/job_keys.h"
#include "services/common/config/job_spec.h"
#include "services/common/config/resolved_job.h"
#include "services/common/ml/dataset.h"
#include "services/common/process/child_process.h"
#include "services/common/wire/tls.h"

namespace strata {

namespace {

// Why a Kubernetes job cannot bring its own certificates; `carrier` names what refuses it.
std::string TlsDirOnKubernetesRefusal(const std::string& carrier) {
  return absl::StrCat(
      "a directory of this machine does not reach the pods, so ", carrier,
      " takes no certificates of the user's: leave security.tls_dir empty and the job's one-shot "
      "step makes the run's own in the run volume (docs/deploy.md, \"TLS on Kubernetes\")");
}

// In containers every service listens on kContainerPort; a metrics endpoint there could not bind.
// strategy.kind stream: what the replicas' protocol needs of the rest of the job.
template <typename ErrorFn>
void StreamJobProblems(const v1::ResolvedJob& job, ErrorFn& error) {
  const v1::ResolvedTraining& training = job.training();
  // Every replica applies every gradient once, in the order it arrives: plain SGD's updates
  // commute, so the replicas end on the same model; momentum's and weight decay's do not.
  // Through servers the servers alone apply them, as in a `ps` job, and the replicas take their
  // model: both are theirs to use.
  const char* order =
      "every replica applies the others' gradients in the order they arrive, and "
      "with it the replicas would no longer agree: set 0 for strategy.kind stream (or train "
      "through parameter servers, stream.sync: servers, which apply it themselves)";
  if (job.stream().sync() != v1::STREAM_SYNC_SERVERS) {
    if (training.momentum() != 0) error("training.momentum", absl::StrCat("momentum: ", order));
    if (training.weight_decay() != 0) {
      error("training.weight_decay", absl::StrCat("weight decay: ", order));
    }
  }
  if (training.lr_milestones_size() > 0) {
    error("training.lr_schedule.milestones",
          "a stream has no epochs to count milestones in; strategy.kind stream keeps training.lr");
  }
  if (training.loss() != v1::LOSS_CROSS_ENTROPY) {
    error("training.loss",
          "a stream event carries a class label: strategy.kind stream trains "
          "cross_entropy");
  }
  if (job.stream().max_events() == 0 && job.stream().max_seconds() == 0) {
    error("stream.max_events",
          "a stream has no end of its own: give stream.max_events or stream.max_seconds");
  }
  if (job.stream().on_drift() == v1::STREAM_ON_DRIFT_RESET_LR &&
      job.stream().lr_decay_events() == 0) {
    error("stream.on_drift",
          "reset_lr restarts the decay of the learning rate, and with "
          "stream.lr_decay_events 0 the rate is constant: give it a number of "
          "events, or use continue");
  }
  if (job.stream().sync() == v1::STREAM_SYNC_SERVERS &&
      job.strategy().consistency() != v1::CONSISTENCY_ASP) {
    error("strategy.consistency",
          "stream.sync servers trains asynchronously (asp): the replicas' windows come as the "
          "stream spreads them, and a mode that waits for every replica's would wait at the "
          "stream's end for windows that never come");
  }
  if (job.launcher().kind() != v1::LAUNCHER_KIND_LOCAL) {
    error("launcher.kind", absl::StrCat("strategy.kind stream runs on the local launcher; '",
                                        Spelled(job.launcher().kind()),
                                        "' does not start a broker and replicas yet"));
  }
}

std::string MetricsPortProblem(const v1::ResolvedJob& job) {
  if (!job.metrics().enabled() || job.metrics().port() != kContainerPort) return "";
  return absl::StrCat(job.metrics().port(),
                      " is every container's gRPC port; pick another (the default is 9464)");
}

// The user's own certificates (security.tls_dir): every file a service will load, checked now
// rather than in each service at start (docs/security.md, "Transport security").
absl::Status CheckUsersCertificates(const v1::ResolvedSecurity& security) {
  TlsSettings settings;
  settings.mode = *TlsModeFromName(Spelled(security.tls()));
  settings.dir = security.tls_dir();
  settings.server_name = security.tls_server_name();
  return LoadTlsMaterial(settings, TlsUse::kServerAndClient).status();
}

// What needs LibTorch to check, for a job of the user's own model or data: strata-evaluator
// --check reads the files as the run will. Its problems come back as "key: what".
absl::StatusOr<std::string> CheckWithLibTorch(const std::string& bin_dir, const std::string& path,
                                              const std::vector<std::string>& overrides) {
  char log_template[] = "/tmp/strata-check-XXXXXX";
  const int fd = ::mkstemp(log_template);
  if (fd < 0) return absl::InternalError("cannot make a temporary file for the model check");
  ::close(fd);
  const std::string log = log_template;
  SpawnOptions o;
  o.name = "strata-evaluator --check";
  o.argv = {absl::StrCat(bin_dir, "/strata-evaluator"), "--config", path};
  for (const std::string& set : overrides) o.argv.insert(o.argv.end(), {"--set", set});
  o.argv.push_back("--check");
  o.log_path = log;
  auto child = ChildProcess::Spawn(o);
  if (!child.ok()) {
    std::remove(log.c_str());
    return child.status();
  }
  // Loading LibTorch, the model, and reading every feature of a large data set once.
  const bool ended = (*child)->WaitFor(std::chrono::minutes(10));
  std::string output = ReadFile(log).value_or("");
  std::remove(log.c_str());
  if (!ended) return absl::DeadlineExceededError("the model check took over 10 minutes");
  if ((*child)->succeeded()) return std::string();
  while (!output.empty() && output.back() == '\n') output.pop_back();
  // The last line is the problem; what comes before is LibTorch talking.
  const size_t line = output.rfind('\n');
  return line == std::string::npos ? output : output.substr(line + 1);
}

}  // namespace

absl::StatusOr<v1::ResolvedJob> LoadAndCheckJob(const std::string& path,
                                                const JobCheckOptions& options) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  // The schema's errors come first, then these checks, all in one report: a typo elsewhere must
  // not hide that the data files are missing. A check whose inputs the schema refused stays
  // silent, since it would only judge the defaults standing in for them.
  JobSpecReading reading = ReadJobSpec(*text, path, options.overrides);
  std::vector<std::string> errors = reading.errors;
  const v1::ResolvedJob& job = reading.job;
  auto usable = [&](std::initializer_list<const char*> keys) {
    if (!reading.mapping_read) return false;
    for (const char* key : keys) {
      if (reading.Refused(key)) return false;
    }
    return true;
  };
  auto error = [&](const std::string& key, const std::string& what) {
    // A key neither the file nor --set gives is blamed on its section (or the file), and says so.
    errors.push_back(absl::StrCat(reading.Where(key), ": ", key, ": ", what,
                                  reading.Given(key) ? "" : " (not set: the default)"));
  };

  // The data files: a typo in dataset.path should fail here, not minutes later in every worker.
  if (usable({"dataset", "training.seed"})) {
    if (auto files = DatasetFiles(DatasetOptionsFor(job)); !files.ok()) {
      error("dataset.path", absl::StrCat("data set '", Spelled(job.dataset().name()),
                                         "' not usable: ", files.status().message()));
    } else {
      for (const std::string& f : *files) {
        if (::access(f.c_str(), R_OK) != 0) error("dataset.path", absl::StrCat("cannot read ", f));
      }
    }
  }

  // The user's own model or data, read as the run will read them: a file that is not
  // TorchScript, a model whose output does not fit the labels, a lying .npy header, NaN.
  const bool own = job.dataset().name() == v1::DATASET_NPY || !job.model().torchscript().empty();
  if (own && !options.bin_dir.empty() && errors.empty()) {
    auto problem = CheckWithLibTorch(options.bin_dir, path, options.overrides);
    if (!problem.ok()) {
      error("model.torchscript", std::string(problem.status().message()));
    } else if (!problem->empty()) {
      const size_t colon = problem->find(": ");
      const std::string key =
          colon == std::string::npos ? "dataset.path" : problem->substr(0, colon);
      const bool known = FindJobKey(key) != nullptr;
      error(known ? key : "dataset.path", known ? problem->substr(colon + 2) : *problem);
    }
  }

  // Without splitting, parameter servers own whole tensors: one more server than tensors would own
  // nothing. (With it, the pieces depend on the shapes, which the workers' and servers' plan
  // checks; services/common/wire/partition_plan.h.)
  if (auto tensors = BuiltinModelTensors(job.arch());
      usable({"model.arch", "cluster.parameter_servers", "strategy.ps_split"}) &&
      job.model().torchscript().empty() && tensors && !job.strategy().ps_split() &&
      job.cluster().parameter_servers() > *tensors) {
    error("cluster.parameter_servers",
          absl::StrCat(job.cluster().parameter_servers(), " parameter servers but model '",
                       Spelled(job.arch()), "' has only ", *tensors,
                       " tensors to partition (with strategy.ps_split false each server owns "
                       "whole tensors)"));
  }

  const v1::ResolvedStrategy& strategy = job.strategy();
  const bool switch_job = strategy.kind() == v1::STRATEGY_KIND_SWITCH;
  const int epochs = job.training().epochs();
  if (usable({"strategy.kind", "strategy.rule", "strategy.at_fraction", "training.epochs"}) &&
      switch_job && strategy.rule() == v1::SWITCH_RULE_AT_FRACTION) {
    // The run aims the switch at the boundary after epoch SwitchEpoch() (SwitchPolicy::Observe),
    // and a switch at or after the last step is skipped (SwitchController::Decide): the boundary
    // after the last epoch is the end of training, so the switch must come before it.
    const int64_t switch_epoch = AtFractionSwitchRule(strategy.at_fraction(), epochs).SwitchEpoch();
    if (switch_epoch >= epochs) {
      error("strategy.at_fraction",
            epochs < 2
                ? absl::StrCat("a switch needs an epoch boundary before the end of training, "
                               "and training.epochs is ",
                               epochs)
                : absl::StrFormat(
                      "ceil(%g x %d epochs) puts the switch after epoch %d, where training "
                      "ends: it would never happen (use at most %d/%d)",
                      strategy.at_fraction(), epochs, switch_epoch, epochs - 1, epochs));
    }
  }
  if (usable({"strategy.kind", "strategy.rule", "strategy.window", "training.epochs"}) &&
      switch_job && strategy.rule() == v1::SWITCH_RULE_EMPIRICAL &&
      epochs < strategy.window() + 1) {
    error(
        "strategy.window",
        absl::StrCat("the empirical rule needs window + 1 = ", strategy.window() + 1,
                     " evaluated epochs but training.epochs is ", epochs, ": it could never fire"));
  }
  const v1::ResolvedSecurity& security = job.security();
  if (usable({"security"}) && TlsOn(job) && !security.tls_dir().empty()) {
    if (absl::Status s = CheckUsersCertificates(security); !s.ok()) {
      error("security.tls_dir", std::string(s.message()));
    }
  }
  const v1::LauncherKind launcher = job.launcher().kind();
  // The rendered job names the run volume's own directory, which `strata supervise` reads in its
  // pod: only another directory is the user's.
  if (usable({"launcher.kind", "security.tls", "security.tls_dir"}) &&
      launcher == v1::LAUNCHER_KIND_KUBERNETES && TlsOn(job) && !security.tls_dir().empty() &&
      security.tls_dir() != RunPaths(kContainerRunDir).tls) {
    error("security.tls_dir",
          TlsDirOnKubernetesRefusal(absl::StrCat("launcher.kind ", Spelled(launcher))));
  }
  if (usable({"metrics.port", "metrics.enabled", "launcher.kind"}) &&
      launcher != v1::LAUNCHER_KIND_LOCAL) {
    if (const std::string problem = MetricsPortProblem(job); !problem.empty()) {
      error("metrics.port", problem);
    }
  }
  if (usable({"strategy.kind", "training.momentum", "training.weight_decay",
              "training.lr_schedule.milestones", "training.loss", "stream.max_events",
              "stream.max_seconds", "stream.on_drift", "stream.lr_decay_events",
              "launcher.kind"}) &&
      strategy.kind() == v1::STRATEGY_KIND_STREAM) {
    StreamJobProblems(job, error);
  }
  if (usable({"launcher.kind"}) && options.for_run && launcher == v1::LAUNCHER_KIND_KUBERNETES) {
    error("launcher.kind",
          "'kubernetes' jobs go to a cluster with `strata submit` (or `strata "
          "render` for the files); `strata run` drives 'local' and 'compose'");
  }
  if (!errors.empty()) return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  return job;
}

std::optional<v1::ResolvedJob> LoadJobOrSayWhy(const std::string& command, const std::string& path,
                                               const JobCheckOptions& options,
                                               const std::string& nothing_was) {
  auto job = LoadAndCheckJob(path, options);
  if (!job.ok()) {
    std::fprintf(stderr, "%s: %s is not a valid job spec; nothing was %s:\n%s\n", command.c_str(),
                 path.c_str(), nothing_was.c_str(), std::string(job.status().message()).c_str());
    return std::nullopt;
  }
  return *std::move(job);
}

absl::StatusOr<v1::ResolvedJob> LoadContainerJob(const std::string& path,
                                                 const std::vector<std::string>& overrides,
                                                 v1::LauncherKind target) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  JobSpecReading reading = ReadJobSpec(*text, path, overrides);
  if (!reading.errors.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(reading.errors, "\n"));
  }
  const v1::ResolvedJob& job = reading.job;
  if (TlsOn(job) && target == v1::LAUNCHER_KIND_KUBERNETES && !job.security().tls_dir().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(reading.Where("security.tls_dir"),
                     ": security.tls_dir: ", TlsDirOnKubernetesRefusal("the Kubernetes renderer")));
  }
  // Compose binds them into every container from here.
  if (TlsOn(job) && !job.security().tls_dir().empty()) {
    if (absl::Status s = CheckUsersCertificates(job.security()); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(reading.Where("security.tls_dir"), ": security.tls_dir: ", s.message()));
    }
  }
  // The user's own files go into the containers from where the spec names them (compose binds
  // them; for Kubernetes the user copies them into a claim): a missing one is named now.
  if (const std::string& model = job.model().torchscript();
      !model.empty() && ::access(model.c_str(), R_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(reading.Where("model.torchscript"),
                                                   ": model.torchscript: cannot read ", model));
  }
  if (job.dataset().name() == v1::DATASET_NPY) {
    if (auto files = DatasetFiles(DatasetOptionsFor(job)); !files.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(reading.Where("dataset.path"),
                                                     ": dataset.path: ", files.status().message()));
    }
  }
  if (const std::string problem = MetricsPortProblem(job); !problem.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(reading.Where("metrics.port"), ": metrics.port: ", problem));
  }
  // Whole tensors only without splitting (strategy.ps_split; the validate check above).
  if (UsesServers(job) && job.model().torchscript().empty() && !job.strategy().ps_split()) {
    const auto tensors = BuiltinModelTensors(job.arch());
    if (tensors && job.cluster().parameter_servers() > *tensors) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": cluster.parameter_servers: ", job.cluster().parameter_servers(),
                       " servers for the ", *tensors, " tensors of model ", Spelled(job.arch()),
                       "; use at most ", *tensors));
    }
  }
  return job;
}

}  // namespace strata
