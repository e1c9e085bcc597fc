#include "orchestrator/launch/container_plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_replace.h>

#include "orchestrator/launch/service_plan.h"
#include "services/common/base/run_directory.h"
#include "services/common/config/job_spec.h"
#include "services/common/config/resolved_job.h"

namespace strata {
namespace {

RunPaths ContainerPathsOf() {
  RunPaths paths(kContainerRunDir);
  paths.job_yaml = kContainerJobSpec;  // read-only: a bind mount or a ConfigMap
  paths.job_resolved = kContainerResolvedJob;
  return paths;
}

std::string Absolute(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

// The job as the containers see it, and the user's files it names, moved under
// kContainerInputsDir.
v1::ResolvedJob ContainerJobOf(const v1::ResolvedJob& job, v1::LauncherKind launcher,
                               std::vector<UserInput>* inputs) {
  v1::ResolvedJob j = job;
  j.mutable_launcher()->set_kind(launcher);
  // Abstract Unix sockets do not cross network namespaces: the ring uses the service address.
  j.mutable_launcher()->set_ring_transport(v1::RING_TRANSPORT_TCP);
  if (!j.model().torchscript().empty()) {
    inputs->push_back({Absolute(j.model().torchscript()), kContainerModel});
    j.mutable_model()->set_torchscript(kContainerModel);
  }
  if (j.dataset().name() == v1::DATASET_NPY) {
    inputs->push_back({Absolute(j.dataset().path()), kContainerData});
    j.mutable_dataset()->set_path(kContainerData);
  }
  // Every container, `strata supervise` included, reads the certificates from the one place.
  // (A Kubernetes job naming its own security.tls_dir is refused before it gets here: a
  // directory of this machine does not reach the pods. Its certificates are the run's.)
  if (TlsOn(j)) {
    if (!j.security().tls_dir().empty() && launcher == v1::LAUNCHER_KIND_COMPOSE) {
      inputs->push_back({Absolute(j.security().tls_dir()), kContainerUserTlsDir});
      j.mutable_security()->set_tls_dir(kContainerUserTlsDir);
    } else {
      j.mutable_security()->set_tls_dir(ContainerPathsOf().tls);
    }
  }
  return j;
}


std::string ListenAddress() { return absl::StrCat("0.0.0.0:", kContainerPort); }


// "BINARY", then one line per flag with its value, joined by backslash-newlines.
std::string CommandLine(const std::string& binary, const std::vector<std::string>& args) {
  std::string out = binary;
  for (size_t i = 0; i < args.size(); ++i) {
    absl::StrAppend(&out, " \\\n  ", ShellWord(args[i]));
    const bool is_flag = args[i].size() > 2 && args[i].compare(0, 2, "--") == 0;
    if (is_flag && i + 1 < args.size() && args[i + 1].compare(0, 2, "--") != 0) {
      absl::StrAppend(&out, " ", ShellWord(args[++i]));
    }
  }
  return out + "\n";
}

std::string ExecLine(const std::string& binary, const std::vector<std::string>& args) {
  return absl::StrCat("exec ", CommandLine(binary, args));
}

// The service's own address, and its metrics endpoint's where the job serves metrics: every
// container has an address of its own, so all share metrics.port.
std::vector<std::string> WithListen(const ServiceSpec& service, const v1::ResolvedJob& job) {
  const std::vector<std::string>& args = service.args;
  std::vector<std::string> out = {"--listen", ListenAddress()};
  if (service.metrics) {
    out.insert(out.end(), {"--metrics-listen", absl::StrCat("0.0.0.0:", job.metrics().port())});
  }
  out.insert(out.end(), args.begin(), args.end());
  return out;
}

// The service reads or writes the shared run directory (its --run-dir, or the resolved job).
bool UsesRunDir(const std::vector<std::string>& args) {
  return std::any_of(args.begin(), args.end(), [](const std::string& a) {
    return a == kContainerRunDir || a.rfind(absl::StrCat(kContainerRunDir, "/"), 0) == 0;
  });
}

// The compose secret is a file; the services read the token from their environment only.
std::string ComposeToken() {
  return absl::StrCat("STRATA_RUN_TOKEN=$(cat ", kComposeTokenFile, ")\nexport STRATA_RUN_TOKEN\n");
}

const char* WaitForShards() {
  return "# The sharder writes the plan to the shared run directory first.\n"
         "until [ -f \"$manifest\" ]; do sleep 2; done\n";
}

std::string ManifestLine() {
  return absl::StrCat("manifest=", ContainerPathsOf().ShardManifest(), "\n");
}

// The CPU quota the service plan gives a service (cluster.stragglers, cluster.cpu); a worker
// without one gets its intra-op threads' worth.
double CpusOf(const v1::ResolvedJob& job, const ServiceSpec& s) {
  if (!s.cpu_fractions.empty()) {
    return *std::min_element(s.cpu_fractions.begin(), s.cpu_fractions.end());
  }
  return s.role == ServiceRole::kWorker ? job.training().threads_per_worker() : 0;
}

std::string CpuNote(const v1::ResolvedJob& job, const ServiceSpec& s, double cpus) {
  if (s.cpu_fractions.empty()) return "";
  for (const v1::ResolvedStraggler& st : job.cluster().stragglers()) {
    if (s.role == ServiceRole::kWorker && s.name == absl::StrCat("worker-", st.worker())) {
      return absl::StrCat("A straggler (cluster.stragglers): ", CpuQuantity(cpus), " of a core.");
    }
  }
  return absl::StrCat("The quota of cluster.cpu: ", CpuQuantity(cpus), " of a core.");
}

struct FlagValue {
  ContainerRole role;
  std::string flag;
  std::string value;
};

const std::vector<FlagValue>& TemplateValues() {
  static const auto* values = new std::vector<FlagValue>{
      {ContainerRole::kParameterServer, "--partition", "${JOB_COMPLETION_INDEX}"},
      {ContainerRole::kWorker, "--rank", "${JOB_COMPLETION_INDEX}"},
      {ContainerRole::kWorker, "--shard-file",
       ContainerPathsOf().At(run_files::ShardIndex("${JOB_COMPLETION_INDEX}"))},
  };
  return *values;
}

std::vector<std::string> Templated(ContainerRole role, std::vector<std::string> args) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    for (const FlagValue& f : TemplateValues()) {
      if (f.role == role && args[i] == f.flag) args[i + 1] = f.value;
    }
  }
  return args;
}

ContainerRole RoleOf(ServiceRole role) {
  switch (role) {
    case ServiceRole::kParameterServer:
      return ContainerRole::kParameterServer;
    case ServiceRole::kWorker:
      return ContainerRole::kWorker;
    case ServiceRole::kEvaluator:
      return ContainerRole::kEvaluator;
  }
  return ContainerRole::kWorker;
}

// The run's own certificates, when the job asks for TLS without naming its own: made once, by the
// one-shot step, in the run volume (a project started again on the same volume keeps them).
std::string RunCertificatesLine(const v1::ResolvedJob& job) {
  const std::string dir = ContainerPathsOf().tls;
  if (!TlsOn(job) || job.security().tls_dir() != dir) return "";
  return absl::StrCat("[ -d ", dir, " ] || ",
                      CommandLine("strata certificates", {"--out", dir, "--server-name",
                                                          job.security().tls_server_name()}));
}

// Where a `ps` job's servers find the initial model (the one-shot step writes it).
std::string InitCheckpointPath() { return ContainerPathsOf().InitCheckpoint(); }

// The one-shot step before the services: the sharder, and for a job on parameter servers from
// the start the initial model the servers load (a worker would build the same from the seed).
ContainerSpec Sharder(const v1::ResolvedJob& job, bool kubernetes) {
  const TaskSpec task = ShardTask(ContainerPathsOf());
  // The job resolved once, with the replica counts the deployment has (a Kubernetes overlay may
  // have changed them after rendering), for every other container to read.
  std::vector<std::string> resolve = {kContainerJobSpec, "--out", kContainerResolvedJob};
  if (kubernetes) {
    resolve.insert(resolve.end(), {"--set", "cluster.workers=${STRATA_WORKERS}"});
    if (UsesServers(job)) {
      resolve.insert(resolve.end(),
                     {"--set", "cluster.parameter_servers=${STRATA_PARAMETER_SERVERS}"});
    }
  }
  ContainerSpec c;
  c.name = task.name;
  c.role = ContainerRole::kSharder;
  c.uses_run_dir = true;
  // In this order: services that wait for the shard manifest then find the rest too.
  c.script = absl::StrCat("set -eu\n", RunCertificatesLine(job),
                          CommandLine("strata resolve", resolve));
  if (job.strategy().kind() == v1::STRATEGY_KIND_PS) {
    const TaskSpec init = InitCheckpointTask(ContainerPathsOf(), InitCheckpointPath());
    absl::StrAppend(&c.script, "mkdir -p ", kContainerRunDir, "/checkpoints\n",
                    CommandLine(init.binary, init.args));
  }
  absl::StrAppend(&c.script, ExecLine(task.binary, task.args));
  return c;
}

ServicePlanInputs ContainerPlanInputs(const v1::ResolvedJob& job) {
  ServicePlanInputs inputs;
  if (job.strategy().kind() == v1::STRATEGY_KIND_PS) inputs.init_checkpoint = InitCheckpointPath();
  inputs.tls_dir = job.security().tls_dir();
  return inputs;
}

// The body of a service's script after the token lines.
std::string ServiceBody(const std::vector<std::string>& args, const std::string& binary,
                        bool wait_for_shards) {
  std::string out;
  if (wait_for_shards) out += ManifestLine() + WaitForShards();
  return out + ExecLine(binary, args);
}

std::string SuperviseExec(const std::string& servers, const std::string& workers,
                          const std::string& evaluator, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {kContainerJobSpec, "--run-dir", kContainerRunDir};
  args.insert(args.end(), extra.begin(), extra.end());
  if (!servers.empty()) args.insert(args.end(), {"--parameter-servers", servers});
  args.insert(args.end(), {"--workers", workers, "--evaluator", evaluator});
  return ExecLine("strata supervise", args);
}

const char kSuperviseNote[] =
    "`strata supervise`: the run's orchestrator. Once every service answers its health check it\n"
    "starts training, evaluates, switches, stops the services and writes the run record to the\n"
    "run directory (docs/deploy.md).";

// A service's container as both platforms run it; the caller names it and writes its script.
ContainerSpec ServiceContainer(const ServiceSpec& service, const v1::ResolvedJob& job) {
  ContainerSpec c;
  c.role = RoleOf(service.role);
  c.serves = true;
  c.metrics_port = service.metrics ? job.metrics().port() : 0;
  c.needs_token = true;
  c.uses_run_dir = UsesRunDir(service.args);
  return c;
}

// The orchestrator's container: `setup` (the token's lines, or the loops that list the peers),
// then `strata supervise`.
ContainerSpec OrchestratorContainer(const std::string& setup, const std::string& supervise) {
  ContainerSpec o;
  o.name = "orchestrator";
  o.role = ContainerRole::kOrchestrator;
  o.uses_run_dir = true;
  o.needs_token = true;
  o.note = kSuperviseNote;
  o.script = absl::StrCat("set -eu\n", setup, supervise);
  return o;
}

}  // namespace

std::string ShellWord(const std::string& word) {
  if (word.empty()) return "''";
  const bool safe = std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
           c == '/' || c == ':' || c == '=' || c == ',' || c == '@' || c == '%' || c == '+';
  });
  if (safe) return word;
  if (word.find('$') != std::string::npos) return absl::StrCat("\"", word, "\"");
  return absl::StrCat("'", absl::StrReplaceAll(word, {{"'", "'\\''"}}), "'");
}

std::string CpuQuantity(double cpus) {
  const int64_t milli = std::llround(cpus * 1000);
  if (milli % 1000 == 0) return std::to_string(milli / 1000);
  return absl::StrCat(milli, "m");
}

absl::StatusOr<KubernetesNames> MakeKubernetesNames(const std::string& job_name) {
  std::string out;
  for (char c : job_name) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const bool ok = (l >= 'a' && l <= 'z') || (l >= '0' && l <= '9');
    if (ok) {
      out += l;
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  // Room for the longest suffix ("-orchestrator") and for the pod names the controllers derive
  // ("<prefix>-worker-<index>-<5 random>") within a 63-character label.
  if (out.size() > 40) out.resize(40);
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("name: '", job_name,
                     "' leaves nothing for Kubernetes object names ([a-z0-9-]); rename "
                     "the job (--set name=...)"));
  }
  KubernetesNames names;
  names.prefix = out;
  return names;
}

const std::vector<TemplatedFlag>& KubernetesTemplatedFlags() {
  static const auto* flags = [] {
    auto* out = new std::vector<TemplatedFlag>;
    for (const FlagValue& f : TemplateValues()) out->push_back({f.role, f.flag});
    return out;
  }();
  return *flags;
}

ContainerPlan PlanComposeContainers(const v1::ResolvedJob& job) {
  ContainerPlan plan;
  plan.job = ContainerJobOf(job, v1::LAUNCHER_KIND_COMPOSE, &plan.inputs);
  plan.job_yaml = JobSpecYaml(plan.job);
  plan.containers.push_back(Sharder(plan.job, false));
  const ServicePlanInputs inputs = ContainerPlanInputs(plan.job);
  std::vector<std::string> servers, workers;
  const std::string port = absl::StrCat(":", kContainerPort);
  for (const ServiceSpec& s : PlanServices(plan.job, ContainerPathsOf(), inputs)) {
    ContainerSpec c = ServiceContainer(s, plan.job);
    c.name = s.name;
    // Compose starts the services once the one-shot step has ended (depends_on).
    c.script =
        absl::StrCat("set -eu\n", ComposeToken(),
                     ServiceBody(WithListen(s, plan.job), s.binary, /*wait_for_shards=*/false));
    c.cpus = CpusOf(plan.job, s);
    c.note = CpuNote(plan.job, s, c.cpus);
    if (s.role == ServiceRole::kWorker) workers.push_back(s.name + port);
    if (s.role == ServiceRole::kParameterServer) servers.push_back(s.name + port);
    plan.containers.push_back(std::move(c));
  }
  plan.containers.push_back(OrchestratorContainer(
      ComposeToken(), SuperviseExec(absl::StrJoin(servers, ","), absl::StrJoin(workers, ","),
                                    "evaluator" + port, {})));
  return plan;
}

ContainerPlan PlanKubernetesContainers(const v1::ResolvedJob& job, const KubernetesNames& names) {
  ContainerPlan plan;
  plan.job = ContainerJobOf(job, v1::LAUNCHER_KIND_KUBERNETES, &plan.inputs);
  plan.job_yaml = JobSpecYaml(plan.job);
  plan.containers.push_back(Sharder(plan.job, true));
  const ServicePlanInputs inputs = ContainerPlanInputs(plan.job);
  bool has_servers = false, has_worker = false, has_evaluator = false;
  for (const ServiceSpec& s : PlanServices(plan.job, ContainerPathsOf(), inputs)) {
    const ContainerRole role = RoleOf(s.role);
    bool& seen = role == ContainerRole::kParameterServer ? has_servers
                 : role == ContainerRole::kWorker        ? has_worker
                                                         : has_evaluator;
    if (seen) continue;  // one template per role, from its first instance
    seen = true;
    ContainerSpec c = ServiceContainer(s, plan.job);
    c.name = role == ContainerRole::kParameterServer ? "ps"
             : role == ContainerRole::kWorker        ? "worker"
                                                     : "evaluator";
    // Every role waits for the one-shot step: it writes the resolved job they all read.
    c.script = absl::StrCat("set -eu\n",
                            ServiceBody(Templated(role, WithListen(s, plan.job)), s.binary, true));
    // One template per role: the role's quota of cluster.cpu, not a rank's own (see
    // kubernetes_render.cc on stragglers and worker speeds).
    const v1::ResolvedCpuShares& cpu = plan.job.cluster().cpu();
    c.cpus = role == ContainerRole::kParameterServer ? cpu.parameter_server()
             : role == ContainerRole::kEvaluator     ? cpu.evaluator()
             : cpu.worker() > 0                      ? cpu.worker()
                                                     : plan.job.training().threads_per_worker();
    plan.containers.push_back(std::move(c));
  }
  const std::string port = absl::StrCat(":", kContainerPort);
  std::string loops;
  std::string servers_arg;
  // Peer lists from the replica counts: pod <job>-<i> of an Indexed Job with
  // a headless Service is reachable as <set>-<i>.<service>.
  auto loop = [&](const std::string& var, const std::string& count, const std::string& pod,
                  const std::string& service) {
    absl::StrAppend(&loops, var, "=\"\"\ni=0\nwhile [ \"$i\" -lt \"$", count, "\" ]; do\n  ", var,
                    "=\"$", var, "${", var, ":+,}", pod, "-$i.", service, port, "\"\n",
                    "  i=$((i + 1))\ndone\n");
  };
  if (has_servers) {
    loop("servers", "STRATA_PARAMETER_SERVERS", names.ps(), names.ps());
    servers_arg = "$servers";
  }
  loop("workers", "STRATA_WORKERS", names.workers(), names.ring());
  std::vector<std::string> extra = {"--set", "cluster.workers=${STRATA_WORKERS}"};
  if (has_servers) {
    extra.insert(extra.end(), {"--set", "cluster.parameter_servers=${STRATA_PARAMETER_SERVERS}"});
  }
  plan.containers.push_back(OrchestratorContainer(
      loops, SuperviseExec(servers_arg, "$workers", names.evaluator() + port, extra)));
  return plan;
}

std::vector<std::string> HealthProbeCommand(const v1::ResolvedJob& job) {
  // Generous: the probe runs inside the container, under its CPU limit (a straggler may have a
  // tenth of a core), on a machine that may be busy.
  std::vector<std::string> probe = {kHealthProbe, absl::StrCat("127.0.0.1:", kContainerPort),
                                    "--deadline-s", "8"};
  if (TlsOn(job)) {
    const v1::ResolvedSecurity& security = job.security();
    probe.insert(probe.end(), {"--tls", Spelled(security.tls()), "--tls-dir", security.tls_dir(),
                               "--tls-server-name", security.tls_server_name()});
  }
  return probe;
}

}  // namespace strata
