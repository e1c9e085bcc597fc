#include "orchestrator/launch/compose_render.h"

#include <string>
#include <vector>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_replace.h>

#include "orchestrator/launch/compose_prometheus.h"
#include "orchestrator/launch/container_plan.h"
#include "orchestrator/launch/yaml_text.h"
#include "services/common/config/job_keys.h"
#include "services/common/config/resolved_job.h"

namespace strata {
namespace {

using yaml::Node;

constexpr char kNetwork[] = "strata";
constexpr char kVolume[] = "run";
constexpr char kTokenSecret[] = "run_token";
constexpr char kTokenFile[] = "run-token";

// Compose interpolates ${VAR} and $VAR from the host's environment; the scripts' own expansions
// must reach the container's shell, so every `$` is doubled.
std::string ComposeEscape(const std::string& script) {
  return absl::StrReplaceAll(script, {{"$", "$$"}});
}

// A compose secret is mounted at /run/secrets/<target>.
std::string SecretName() {
  const std::string path = kComposeTokenFile;
  return path.substr(path.rfind('/') + 1);
}

// Generous bounds for the machine compose runs on (a model and its data must fit a worker's);
// the Kubernetes overlays set tighter ones per profile.
std::string ComposeMemoryLimit(ContainerRole role) {
  switch (role) {
    case ContainerRole::kOrchestrator:
      return "1g";
    case ContainerRole::kWorker:
      return "8g";
    default:
      return "4g";
  }
}

Node Service(const ContainerSpec& c, const RenderOptions& options, const ContainerPlan& plan) {
  Node s = Node::Map();
  s.Add("image", Node::Str(options.image));
  s.Add("entrypoint", Node::Strs({"/bin/sh", "-c"}).Flow());
  s.Add("command", Node::Seq().Push(Node::Str(ComposeEscape(c.script))));
  if (c.needs_token) {
    Node secret = Node::Map();
    secret.Add("source", Node::Str(kTokenSecret)).Add("target", Node::Str(SecretName()));
    s.Add("secrets", Node::Seq().Push(std::move(secret)));
  }
  // The job spec as a read-only bind mount: compose v1 ignores `configs` outside a swarm.
  std::vector<std::string> volumes = {absl::StrCat("./job.yaml:", kContainerJobSpec, ":ro")};
  if (c.uses_run_dir) volumes.push_back(absl::StrCat(kVolume, ":", kContainerRunDir));
  // The user's own model and data, bound read-only from where the job spec names them.
  for (const UserInput& in : plan.inputs) {
    volumes.push_back(absl::StrCat(in.host_path, ":", in.container_path, ":ro"));
  }
  s.Add("volumes", Node::Strs(volumes));
  s.Add("networks", Node::Strs({kNetwork}));
  Node depends = Node::Map();
  auto on = [&](const std::string& service, const char* condition) {
    depends.Add(service, Node::Map().Add("condition", Node::Str(condition)));
  };
  if (c.role == ContainerRole::kParameterServer || c.role == ContainerRole::kWorker ||
      c.role == ContainerRole::kEvaluator || c.role == ContainerRole::kOrchestrator) {
    on("sharder", "service_completed_successfully");
  }
  if (c.role == ContainerRole::kOrchestrator) {
    for (const ContainerSpec& other : plan.containers) {
      if (other.serves) on(other.name, "service_healthy");
    }
    // So that `up orchestrator` starts it too; it scrapes whatever is up.
    if (options.with_prometheus) on(kComposePrometheusService, "service_started");
  }
  if (!depends.empty()) s.Add("depends_on", std::move(depends));
  if (c.serves) {
    // Generous (HealthProbeCommand): one unhealthy verdict before the orchestrator starts fails
    // the whole project.
    Node health = Node::Map();
    std::vector<std::string> probe = {"CMD"};
    for (std::string& word : HealthProbeCommand(plan.job)) probe.push_back(std::move(word));
    health.Add("test", Node::Strs(probe).Flow());
    health.Add("interval", Node::Str("5s"));
    health.Add("timeout", Node::Str("10s"));
    health.Add("retries", Node::Int(6));
    health.Add("start_period", Node::Str("120s"));
    s.Add("healthcheck", std::move(health),
          "The standard gRPC health check (grpc.health.v1.Health) on the service's port.");
  }
  if (c.cpus > 0) s.Add("cpus", Node::Num(c.cpus), c.note);
  // Hardened as the Kubernetes pods are: a root filesystem nobody writes (scratch in a small
  // in-memory /tmp), no capabilities and no way to gain any, and bounds on processes and memory
  // so that one container cannot starve the machine. Raise mem_limit here for a large model.
  s.Add("read_only", Node::Bool(true));
  s.Add("tmpfs", Node::Strs({"/tmp:size=64m"}));
  s.Add("cap_drop", Node::Strs({"ALL"}).Flow());
  s.Add("security_opt", Node::Strs({"no-new-privileges:true"}).Flow());
  s.Add("pids_limit", Node::Int(1024));
  s.Add("mem_limit", Node::Str(ComposeMemoryLimit(c.role)));
  // Services end when the orchestrator stops them; a container that exits is not restarted.
  s.Add("restart", Node::Str("no"));
  if (c.role == ContainerRole::kOrchestrator) s.Comment(c.note);
  return s;
}

}  // namespace

RenderedFiles RenderCompose(const v1::ResolvedJob& job, const RenderOptions& options) {
  const ContainerPlan plan = PlanComposeContainers(job);
  Node doc = Node::Map();
  doc.Comment(absl::StrCat(
      "Job '", job.name(), "' for docker-compose (v1 1.29+, file format 3.9), written by\n",
      "`strata render --launcher compose`: render again after changing the job spec rather than\n",
      "editing this file. Run it with (naming the service attaches to it alone, so the one-shot\n",
      "sharder's exit does not end the project):\n", "  openssl rand -hex 32 > ", kTokenFile,
      "   # the run token, read by every service\n",
      "  docker-compose up --exit-code-from orchestrator orchestrator\n",
      "  docker-compose down --volumes\n", "The image (", options.image,
      ") holds the strata binaries, the `", kHealthProbe, "` probe and the\n",
      "data set at dataset.path. See docs/deploy.md."));
  doc.Add("version", Node::Str("3.9"));
  Node services = Node::Map();
  for (const ContainerSpec& c : plan.containers) services.Add(c.name, Service(c, options, plan));
  if (options.with_prometheus) {
    services.Add(kComposePrometheusService, ComposePrometheusService(options, kNetwork),
                 absl::StrCat("Scrapes every service's /metrics (", kComposePrometheusConfig,
                              "); http://127.0.0.1:", kPrometheusPort, " on this machine."));
  }
  doc.Add("services", std::move(services));
  Node networks = Node::Map();
  networks.Add(kNetwork, Node::Map().Add("internal", Node::Bool(true)),
               "No route out: the services reach each other by service name only.");
  if (options.with_prometheus) {
    networks.Add(kComposePrometheusNetwork, Node::Map(),
                 "Prometheus alone: Docker publishes no port of a container on internal networks "
                 "only.");
  }
  doc.Add("networks", std::move(networks));
  Node volumes = Node::Map();
  volumes.Add(kVolume, Node::Map(), "The run directory: shards, checkpoints, the run record.");
  if (options.with_prometheus) {
    volumes.Add(kComposePrometheusVolume, Node::Map(),
                "Prometheus's time series; `down --volumes` removes them with the run's.");
  }
  doc.Add("volumes", std::move(volumes));
  doc.Add("secrets",
          Node::Map().Add(kTokenSecret,
                          Node::Map().Add("file", Node::Str(absl::StrCat("./", kTokenFile))),
                          "Created by you, never rendered: see the top of this file."));
  RenderedFiles files;
  files["docker-compose.yml"] = yaml::Emit(doc);
  files["job.yaml"] =
      absl::StrCat("# The resolved job spec of '", job.name(),
                   "' as the containers read it (written by `strata render`).\n", plan.job_yaml,
                   plan.job_yaml.empty() || plan.job_yaml.back() == '\n' ? "" : "\n");
  if (options.with_prometheus) {
    files[kComposePrometheusConfig] = ComposePrometheusConfig(job, plan);
  }
  files[".gitignore"] =
      absl::StrCat("# The run token: a secret, never committed.\n", kTokenFile, "\n");
  return files;
}

}  // namespace strata
