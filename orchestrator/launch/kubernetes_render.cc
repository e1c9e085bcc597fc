#include "orchestrator/launch/kubernetes_render.h"

#include <algorithm>
#include <string>
#include <vector>

#include <absl/strings/escaping.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_replace.h>

#include "orchestrator/launch/container_plan.h"
#include "orchestrator/launch/kubernetes_monitoring.h"
#include "orchestrator/launch/kubernetes_profiles.h"
#include "orchestrator/launch/yaml_text.h"
#include "services/common/base/status.h"
#include "services/common/config/resolved_job.h"

namespace strata {
namespace {

using yaml::Node;

constexpr char kTokenFile[] = "run-token";
constexpr char kTokenKey[] = "token";

class Builder {
 public:
  Builder(const v1::ResolvedJob& job, const KubernetesNames& names, const RenderOptions& options)
      : job_(job),
        names_(names),
        options_(options),
        plan_(PlanKubernetesContainers(job, names)),
        servers_(UsesServers(job)) {}

  RenderedFiles Render() {
    RenderedFiles files;
    files["base/kustomization.yaml"] = yaml::Emit(BaseKustomization());
    files["base/job.yaml"] = JobYaml();
    files["base/.gitignore"] =
        absl::StrCat("# The run token: a secret, never committed.\n", kTokenFile, "\n");
    files["base/network-policy.yaml"] = yaml::Emit(NetworkPolicy());
    files["base/run-volume.yaml"] = yaml::Emit(RunVolume());
    if (servers_) {
      files["base/parameter-servers.yaml"] =
          yaml::EmitAll({HeadlessService(names_.ps(), "ps"), ParameterServers(Base())});
    }
    files["base/workers.yaml"] =
        yaml::EmitAll({HeadlessService(names_.ring(), "worker"), Workers(Base())});
    files["base/evaluator.yaml"] = yaml::EmitAll({EvaluatorService(), Evaluator()});
    files["base/orchestrator.yaml"] = yaml::Emit(Orchestrator(false));
    if (options_.service_monitor) {
      files["base/monitoring.yaml"] = yaml::EmitAll(KubernetesMonitoringObjects(names_, plan_));
    }
    AddOverlay("small", SmallProfile(job_), &files);
    AddOverlay("large", LargeProfile(job_), &files);
    return files;
  }

  // The objects `kubectl kustomize` builds from base/ (overlay "") or an overlay, with the
  // generators' output under plain names and the orchestrator Job suspended.
  absl::StatusOr<KubernetesSubmission> Submission(const std::string& overlay,
                                                  const std::string& run_token) const {
    Profile p;
    if (overlay.empty()) {
      p = Base();
    } else if (overlay == "small") {
      p = SmallProfile(job_);
    } else if (overlay == "large") {
      p = LargeProfile(job_);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown overlay '", overlay, "': use small or large (none: the base)"));
    }
    KubernetesSubmission s;
    s.job_name = names_.orchestrator();
    s.instance = names_.prefix;
    s.job = Orchestrator(true);
    s.run_volume = RunVolume();
    s.owned.push_back(
        GeneratedConfigMap(names_.job_spec(), Node::Map().Add("job.yaml", Node::Str(JobYaml()))));
    Node topology = Node::Map();
    for (const auto& [key, value] : TopologyValues(p)) topology.Add(key, Node::Str(value));
    s.owned.push_back(GeneratedConfigMap(names_.topology(), std::move(topology)));
    s.owned.push_back(RunTokenSecret(run_token));
    s.owned.push_back(NetworkPolicy());
    if (servers_) {
      s.owned.push_back(HeadlessService(names_.ps(), "ps"));
      s.owned.push_back(ParameterServers(p));
    }
    s.owned.push_back(HeadlessService(names_.ring(), "worker"));
    s.owned.push_back(Workers(p));
    s.owned.push_back(EvaluatorService());
    s.owned.push_back(Evaluator());
    return s;
  }

 private:
  std::string JobYaml() const {
    return absl::StrCat("# The resolved job spec of '", job_.name(),
                        "' as the containers read it (written by `strata render`).\n",
                        plan_.job_yaml, plan_.job_yaml.back() == '\n' ? "" : "\n");
  }

  // The base profile with the job's own CPU quotas (cluster.cpu) where it sets them.
  Profile Base() const {
    Profile p = BaseProfile(job_);
    if (const double w = Container(ContainerRole::kWorker).cpus; w > 0) {
      p.worker.cpu_request = p.worker.cpu_limit = CpuQuantity(w);
    }
    if (servers_) {
      if (const double ps = Container(ContainerRole::kParameterServer).cpus; ps > 0) {
        p.ps.cpu_request = p.ps.cpu_limit = CpuQuantity(ps);
      }
    }
    return p;
  }

  Resources EvaluatorResources() const {
    Resources r{"500m", "1", "512Mi", "1Gi"};
    if (const double e = Container(ContainerRole::kEvaluator).cpus; e > 0) {
      r.cpu_request = r.cpu_limit = CpuQuantity(e);
    }
    return r;
  }

  const ContainerSpec& Container(ContainerRole role) const {
    for (const ContainerSpec& c : plan_.containers) {
      if (c.role == role) return c;
    }
    return plan_.containers.front();
  }

  Node Labels(const std::string& component) const { return KubernetesLabels(names_, component); }

  Node Metadata(const std::string& name, const std::string& component, bool owned) const {
    Node m = Node::Map();
    m.Add("name", Node::Str(name));
    m.Add("labels", Labels(component));
    if (owned) {
      m.Add("annotations", OwnerAnnotations(),
            "`strata submit` turns this into an owner reference once the Job has a UID.");
    }
    return m;
  }

  Node Object(const std::string& api, const std::string& kind, Node metadata) const {
    Node o = Node::Map();
    o.Add("apiVersion", Node::Str(api))
        .Add("kind", Node::Str(kind))
        .Add("metadata", std::move(metadata));
    return o;
  }

  static Node ResourcesNode(const Resources& r) {
    Node n = Node::Map();
    n.Add("requests", Node::Map()
                          .Add("cpu", Node::Str(r.cpu_request))
                          .Add("memory", Node::Str(r.memory_request)));
    n.Add("limits",
          Node::Map().Add("cpu", Node::Str(r.cpu_limit)).Add("memory", Node::Str(r.memory_limit)));
    return n;
  }

  // The kubelet's own gRPC probe; under security.tls, which it does not speak, `strata-health`
  // run in the container as a client of the run's CA (HealthProbeCommand).
  Node HealthProbe(int period, int failures) const {
    Node p = Node::Map();
    if (TlsOn(plan_.job)) {
      p.Add("exec", Node::Map().Add("command", Node::Strs(HealthProbeCommand(plan_.job)).Flow()));
    } else {
      p.Add("grpc", Node::Map().Add("port", Node::Int(kContainerPort)));
    }
    p.Add("periodSeconds", Node::Int(period));
    // Not the default 1 s: a server busy training (or throttled to a small CPU limit) may take
    // longer to answer, and a liveness failure restarts the container. The exec probe's own
    // deadline is 8 s.
    p.Add("timeoutSeconds", Node::Int(TlsOn(plan_.job) ? 10 : 5));
    p.Add("failureThreshold", Node::Int(failures));
    return p;
  }

  // One container of a pod: the role's script, the job spec, the run directory, the token.
  Node ContainerNode(const ContainerSpec& c, const Resources& resources) const {
    Node n = Node::Map();
    n.Add("name", Node::Str(c.name));
    n.Add("image", Node::Str(options_.image));
    n.Add("imagePullPolicy", Node::Str("IfNotPresent"));
    n.Add("command", Node::Strs({"/bin/sh", "-c"}).Flow());
    // The kubelet expands $(VAR) in args; `$$(` keeps the shell's command substitutions.
    n.Add("args", Node::Seq().Push(Node::Str(absl::StrReplaceAll(c.script, {{"$(", "$$("}}))));
    if (c.serves) {
      Node ports = Node::Seq().Push(Node::Map()
                                        .Add("name", Node::Str("grpc"))
                                        .Add("containerPort", Node::Int(kContainerPort)));
      if (c.metrics_port > 0) {
        ports.Push(Node::Map()
                       .Add("name", Node::Str("metrics"))
                       .Add("containerPort", Node::Int(c.metrics_port)));
      }
      n.Add("ports", std::move(ports));
    }
    Node env = Node::Seq();
    if (c.needs_token) {
      Node ref = Node::Map();
      ref.Add("name", Node::Str(names_.token())).Add("key", Node::Str(kTokenKey));
      env.Push(Node::Map()
                   .Add("name", Node::Str("STRATA_RUN_TOKEN"))
                   .Add("valueFrom", Node::Map().Add("secretKeyRef", std::move(ref))));
    }
    if (!env.empty()) n.Add("env", std::move(env));
    n.Add("envFrom", Node::Seq().Push(Node::Map().Add(
                         "configMapRef", Node::Map().Add("name", Node::Str(names_.topology())))));
    Node mounts = Node::Seq();
    mounts.Push(Node::Map()
                    .Add("name", Node::Str("job-spec"))
                    .Add("mountPath", Node::Str("/etc/strata"))
                    .Add("readOnly", Node::Bool(true)));
    if (c.uses_run_dir) {
      mounts.Push(
          Node::Map().Add("name", Node::Str("run")).Add("mountPath", Node::Str(kContainerRunDir)));
    }
    if (!plan_.inputs.empty()) {
      mounts.Push(Node::Map()
                      .Add("name", Node::Str("inputs"))
                      .Add("mountPath", Node::Str(kContainerInputsDir))
                      .Add("readOnly", Node::Bool(true)));
    }
    // The root filesystem is read-only; what a process may write outside the run directory
    // (scratch files) goes to a small in-memory /tmp.
    mounts.Push(Node::Map().Add("name", Node::Str("tmp")).Add("mountPath", Node::Str("/tmp")));
    n.Add("volumeMounts", std::move(mounts));
    n.Add("resources", ResourcesNode(resources));
    n.Add("securityContext", ContainerSecurity());
    if (c.serves) {
      // Servers and workers wait for the shard plan before they listen: the startup probe
      // gives them the sharder's time (30 minutes) before liveness counts.
      n.Add(
          "startupProbe", HealthProbe(5, 360),
          "The standard gRPC health check (grpc.health.v1.Health), no token: see docs/deploy.md.");
      n.Add("readinessProbe", HealthProbe(5, 3));
      n.Add("livenessProbe", HealthProbe(10, 6));
    }
    return n;
  }

  // What the Pod Security "restricted" level asks of a container, and a root filesystem nobody
  // can write: a compromised process cannot replace the binaries the next one runs.
  static Node ContainerSecurity() {
    Node s = Node::Map();
    s.Add("allowPrivilegeEscalation", Node::Bool(false));
    s.Add("readOnlyRootFilesystem", Node::Bool(true));
    s.Add("capabilities", Node::Map().Add("drop", Node::Strs({"ALL"}).Flow()));
    return s;
  }

  // The image's user (docker/Dockerfile), never root; the run volume's files belong to its group.
  static Node PodSecurity() {
    Node s = Node::Map();
    s.Add("runAsNonRoot", Node::Bool(true));
    s.Add("runAsUser", Node::Int(kImageUid));
    s.Add("runAsGroup", Node::Int(kImageUid));
    s.Add("fsGroup", Node::Int(kImageUid));
    s.Add("seccompProfile", Node::Map().Add("type", Node::Str("RuntimeDefault")));
    return s;
  }

  Node Volumes(bool run_dir) const {
    Node v = Node::Seq();
    v.Push(Node::Map()
               .Add("name", Node::Str("tmp"))
               .Add("emptyDir", Node::Map()
                                    .Add("medium", Node::Str("Memory"))
                                    .Add("sizeLimit", Node::Str("64Mi"))));
    v.Push(Node::Map()
               .Add("name", Node::Str("job-spec"))
               .Add("configMap", Node::Map().Add("name", Node::Str(names_.job_spec()))));
    if (run_dir) {
      v.Push(Node::Map()
                 .Add("name", Node::Str("run"))
                 .Add("persistentVolumeClaim",
                      Node::Map().Add("claimName", Node::Str(names_.run_volume()))));
    }
    if (!plan_.inputs.empty()) {
      Node claim = Node::Map();
      claim.Add("claimName", Node::Str(names_.inputs())).Add("readOnly", Node::Bool(true));
      v.Push(Node::Map()
                 .Add("name", Node::Str("inputs"))
                 .Add("persistentVolumeClaim", std::move(claim)),
             "Your model at model.pt and your .npy files under data/ in this claim, which you "
             "create and fill (docs/deploy.md).");
    }
    return v;
  }

  // What the usual Kubernetes scrape configurations (and the Prometheus Helm chart's) look for.
  static void AddScrapeAnnotations(int metrics_port, Node* annotations) {
    annotations->Add("prometheus.io/scrape", Node::Str("true"))
        .Add("prometheus.io/port", Node::Str(std::to_string(metrics_port)))
        .Add("prometheus.io/path", Node::Str("/metrics"));
  }

  Node PodTemplate(const std::string& component, Node pod_spec, int metrics_port = 0) const {
    Node t = Node::Map();
    Node metadata = Node::Map().Add("labels", Labels(component));
    if (metrics_port > 0) {
      Node annotations = Node::Map();
      AddScrapeAnnotations(metrics_port, &annotations);
      metadata.Add("annotations", std::move(annotations));
    }
    t.Add("metadata", std::move(metadata));
    t.Add("spec", std::move(pod_spec));
    return t;
  }

  Node PodSpec(const ContainerSpec& c, const Resources& r, const std::string& restart) const {
    Node spec = Node::Map();
    spec.Add("restartPolicy", Node::Str(restart));
    spec.Add("automountServiceAccountToken", Node::Bool(false),
             "No process of the job calls the Kubernetes API.");
    spec.Add("securityContext", PodSecurity());
    spec.Add("containers", Node::Seq().Push(ContainerNode(c, r)));
    spec.Add("volumes", Volumes(c.uses_run_dir));
    return spec;
  }

  Node Selector(const std::string& component) const {
    return Node::Map().Add("matchLabels", Labels(component));
  }

  Node GrpcServicePorts() const {
    return Node::Seq().Push(Node::Map()
                                .Add("name", Node::Str("grpc"))
                                .Add("port", Node::Int(kContainerPort))
                                .Add("targetPort", Node::Str("grpc")));
  }

  Node HeadlessService(const std::string& name, const std::string& component) const {
    Node o = Object("v1", "Service", Metadata(name, component, true));
    Node spec = Node::Map();
    spec.Add("clusterIP", Node::Str("None"), "Headless: one DNS name per pod, <pod>." + name + ".");
    // Peers resolve each other while they start, before they are ready.
    spec.Add("publishNotReadyAddresses", Node::Bool(true));
    spec.Add("selector", Labels(component));
    spec.Add("ports", GrpcServicePorts());
    o.Add("spec", std::move(spec));
    return o;
  }

  // What one instance of a role is and how many there are, for IndexedJob.
  struct IndexedRole {
    std::string name;       // the Job's name, also each pod's <name>-<index>
    std::string component;  // "ps" / "worker"
    ContainerRole role;
    int count = 0;
    std::string count_variable;  // the topology key that must agree with `count`
    std::string index_meaning;   // "Partition" / "Rank"
    std::string lost;            // "server" / "worker"
    std::string subdomain;       // the headless Service that gives each pod a DNS name
    Resources resources;
  };

  // An Indexed Job: instance i is JOB_COMPLETION_INDEX i, pod <name>-<i> is reachable as
  // <name>-<i>.<subdomain>. restartPolicy Never and backoffLimit 0: an instance that the
  // orchestrator stops at the run's end exits 0 and stays done (a StatefulSet would restart a
  // server and keep it idling until someone deleted the set), and one that dies fails the run.
  Node IndexedJob(const IndexedRole& r) const {
    Node spec = Node::Map();
    spec.Add("completionMode", Node::Str("Indexed"), r.index_meaning + " = JOB_COMPLETION_INDEX.");
    spec.Add("completions", Node::Int(r.count),
             "Keep both equal to " + r.count_variable + " in the topology ConfigMap.");
    spec.Add("parallelism", Node::Int(r.count));
    spec.Add("backoffLimit", Node::Int(0),
             "A lost " + r.lost + " fails the run; the orchestrator reports it.");
    const ContainerSpec& container = Container(r.role);
    Node pod = PodSpec(container, r.resources, "Never");
    pod.Add("subdomain", Node::Str(r.subdomain),
            absl::StrCat("Pod ", r.name, "-<i> is ", r.name, "-<i>.", r.subdomain, "."));
    spec.Add("template", PodTemplate(r.component, std::move(pod), container.metrics_port));
    Node o = Object("batch/v1", "Job", Metadata(r.name, r.component, true));
    o.Add("spec", std::move(spec));
    return o;
  }

  Node ParameterServers(const Profile& p) const {
    return IndexedJob({names_.ps(), "ps", ContainerRole::kParameterServer, p.parameter_servers,
                       "STRATA_PARAMETER_SERVERS", "Partition", "server", names_.ps(), p.ps});
  }

  Node Workers(const Profile& p) const {
    Node o = IndexedJob({names_.workers(), "worker", ContainerRole::kWorker, p.workers,
                         "STRATA_WORKERS", "Rank", "worker", names_.ring(), p.worker});
    std::vector<std::string> per_rank;
    for (const v1::ResolvedStraggler& s : job_.cluster().stragglers()) {
      per_rank.push_back(
          absl::StrCat("worker ", s.worker(), " at ", CpuQuantity(s.cpu_fraction())));
    }
    if (job_.cluster().worker_speeds_size() > 0) per_rank.push_back("cluster.worker_speeds");
    if (!per_rank.empty()) {
      o.Comment(absl::StrCat(
          "Per-rank CPU quotas (", absl::StrJoin(per_rank, ", "), ") are not applied here: one\n",
          "pod template serves every rank, so a rank's own limit needs a Job of its own."));
    }
    return o;
  }

  Node EvaluatorService() const {
    Node o = Object("v1", "Service", Metadata(names_.evaluator(), "evaluator", true));
    o.Add("spec",
          Node::Map().Add("selector", Labels("evaluator")).Add("ports", GrpcServicePorts()));
    return o;
  }

  Node Evaluator() const {
    Node metadata = Metadata(names_.evaluator(), "evaluator", true);
    if (const int port = Container(ContainerRole::kEvaluator).metrics_port; port > 0) {
      AddScrapeAnnotations(port, metadata.Find("annotations"));
    }
    Node o = Object("v1", "Pod", std::move(metadata));
    o.Comment("A bare Pod: the evaluator exits when the orchestrator stops it, and stays done.");
    o.Add("spec", PodSpec(Container(ContainerRole::kEvaluator), EvaluatorResources(), "OnFailure"));
    return o;
  }

  Node Orchestrator(bool suspended) const {
    Node o = Object("batch/v1", "Job", Metadata(names_.orchestrator(), "orchestrator", false));
    o.Comment(Container(ContainerRole::kOrchestrator).note);
    Node spec = Node::Map();
    if (suspended) {
      spec.Add("suspend", Node::Bool(true),
               "`strata submit` resumes the Job once every object it owns exists.");
    }
    spec.Add("backoffLimit", Node::Int(0));
    spec.Add("ttlSecondsAfterFinished", Node::Int(86400),
             "A day after the run ends the Job goes, and with it every object it owns.");
    Node pod = PodSpec(Container(ContainerRole::kOrchestrator), {"100m", "500m", "128Mi", "256Mi"},
                       "Never");
    Node init = ContainerNode(Container(ContainerRole::kSharder), {"1", "1", "1Gi", "2Gi"});
    pod.Add("initContainers", Node::Seq().Push(std::move(init)),
            "The one-shot sharder: its plan lands on the run volume before supervision starts.");
    spec.Add("template", PodTemplate("orchestrator", std::move(pod)));
    o.Add("spec", std::move(spec));
    return o;
  }

  Node RunVolume() const {
    Node o = Object("v1", "PersistentVolumeClaim", Metadata(names_.run_volume(), "", false));
    o.Comment(
        "The run directory (shards, checkpoints, the run record), shared by pods on any node:\n"
        "the cluster needs a ReadWriteMany storage class (NFS, CephFS, a cloud file store).\n"
        "Not owned by the orchestrator Job: the record outlives the run.");
    Node spec = Node::Map();
    spec.Add("accessModes", Node::Strs({"ReadWriteMany"}));
    spec.Add("resources",
             Node::Map().Add("requests", Node::Map().Add("storage", Node::Str("1Gi"))));
    o.Add("spec", std::move(spec));
    return o;
  }

  Node NetworkPolicy() const {
    Node o = Object("networking.k8s.io/v1", "NetworkPolicy",
                    Metadata(names_.prefix + "-intra-job", "", true));
    o.Comment(
        "Only the job's own pods talk to each other, plus DNS. The kubelet's probes come from\n"
        "the node, which most network plugins admit regardless.");
    Node spec = Node::Map();
    spec.Add("podSelector", Node::Map().Add("matchLabels", Labels("")));
    spec.Add("policyTypes", Node::Strs({"Ingress", "Egress"}));
    Node same = Node::Seq().Push(
        Node::Map().Add("podSelector", Node::Map().Add("matchLabels", Labels(""))));
    spec.Add("ingress", Node::Seq().Push(Node::Map().Add("from", same)));
    Node dns = Node::Map();
    dns.Add("to",
            Node::Seq().Push(
                Node::Map()
                    .Add("namespaceSelector", Node::Map())
                    .Add("podSelector",
                         Node::Map().Add("matchLabels",
                                         Node::Map().Add("k8s-app", Node::Str("kube-dns"))))));
    Node ports = Node::Seq();
    for (const char* protocol : {"UDP", "TCP"}) {
      ports.Push(Node::Map().Add("protocol", Node::Str(protocol)).Add("port", Node::Int(53)));
    }
    dns.Add("ports", std::move(ports));
    spec.Add("egress", Node::Seq().Push(Node::Map().Add("to", same)).Push(std::move(dns)));
    o.Add("spec", std::move(spec));
    return o;
  }

  std::vector<std::pair<std::string, std::string>> TopologyValues(const Profile& p) const {
    std::vector<std::pair<std::string, std::string>> values = {
        {"STRATA_WORKERS", absl::StrCat(p.workers)}};
    if (servers_) values.push_back({"STRATA_PARAMETER_SERVERS", absl::StrCat(p.parameter_servers)});
    return values;
  }

  Node TopologyLiterals(const Profile& p) const {
    std::vector<std::string> literals;
    for (const auto& [key, value] : TopologyValues(p)) literals.push_back(key + "=" + value);
    return Node::Strs(literals);
  }

  // What the base's generators make (labels and annotations from generatorOptions), under the
  // plain name: a submission is applied once, so the content hash kustomize appends for
  // rollouts would change nothing.
  Node GeneratedMetadata(const std::string& name) const {
    Node m = Node::Map();
    m.Add("name", Node::Str(name));
    m.Add("labels", Labels(""));
    m.Add("annotations", OwnerAnnotations());
    return m;
  }

  Node GeneratedConfigMap(const std::string& name, Node data) const {
    Node o = Object("v1", "ConfigMap", GeneratedMetadata(name));
    o.Add("data", std::move(data));
    return o;
  }

  Node RunTokenSecret(const std::string& token) const {
    Node o = Object("v1", "Secret", GeneratedMetadata(names_.token()));
    o.Add("type", Node::Str("Opaque"));
    o.Add("data", Node::Map().Add(kTokenKey, Node::Str(absl::Base64Escape(token))));
    return o;
  }

  Node OwnerAnnotations() const {
    return Node::Map().Add(kOwnerAnnotation, Node::Str(names_.orchestrator()));
  }

  Node BaseKustomization() const {
    Node k = Node::Map();
    k.Comment(absl::StrCat(
        "Job '", job_.name(), "' for Kubernetes (1.24+: gRPC probes), written by `strata render\n",
        "--launcher kubernetes`: render again after changing the job spec rather than editing.\n",
        "Before `kubectl apply -k` (this directory or an overlay):\n",
        "  openssl rand -hex 32 > base/", kTokenFile, "   # the run token, read by every service\n",
        "See docs/deploy.md."));
    k.Add("apiVersion", Node::Str("kustomize.config.k8s.io/v1beta1"));
    k.Add("kind", Node::Str("Kustomization"));
    std::vector<std::string> resources = {"run-volume.yaml", "network-policy.yaml"};
    if (servers_) resources.push_back("parameter-servers.yaml");
    resources.insert(resources.end(), {"workers.yaml", "evaluator.yaml", "orchestrator.yaml"});
    if (options_.service_monitor) resources.push_back("monitoring.yaml");
    k.Add("resources", Node::Strs(resources));
    k.Add("generatorOptions",
          Node::Map().Add("labels", Labels("")).Add("annotations", OwnerAnnotations()));
    Node maps = Node::Seq();
    maps.Push(Node::Map()
                  .Add("name", Node::Str(names_.job_spec()))
                  .Add("files", Node::Strs({"job.yaml"})));
    maps.Push(Node::Map()
                  .Add("name", Node::Str(names_.topology()))
                  .Add("literals", TopologyLiterals(BaseProfile(job_))),
              "Replica counts every container reads; the overlays change them.");
    k.Add("configMapGenerator", std::move(maps));
    Node secret = Node::Map();
    secret.Add("name", Node::Str(names_.token()));
    secret.Add("files", Node::Strs({absl::StrCat(kTokenKey, "=", kTokenFile)}));
    k.Add("secretGenerator", Node::Seq().Push(std::move(secret)),
          absl::StrCat("From the file you create (see above); ", kTokenFile, " is git-ignored."));
    return k;
  }

  // A strategic-merge patch of one workload's replica count and one container's resources.
  Node ContainerPatch(const std::string& name, const Resources& r) const {
    return Node::Seq().Push(
        Node::Map().Add("name", Node::Str(name)).Add("resources", ResourcesNode(r)));
  }

  void AddOverlay(const std::string& name, const Profile& p, RenderedFiles* files) const {
    const std::string dir = absl::StrCat("overlays/", name, "/");
    Node k = Node::Map();
    k.Comment(absl::StrCat(
        "The ", name, " variant of job '", job_.name(), "': ", p.workers, " worker(s)",
        servers_ ? absl::StrCat(", ", p.parameter_servers, " parameter server(s)") : std::string(),
        ".\n`kubectl apply -k ", dir.substr(0, dir.size() - 1), "` (after creating base/",
        kTokenFile, ")."));
    k.Add("apiVersion", Node::Str("kustomize.config.k8s.io/v1beta1"));
    k.Add("kind", Node::Str("Kustomization"));
    k.Add("resources", Node::Strs({"../../base"}));
    k.Add("configMapGenerator", Node::Seq().Push(Node::Map()
                                                     .Add("name", Node::Str(names_.topology()))
                                                     .Add("behavior", Node::Str("merge"))
                                                     .Add("literals", TopologyLiterals(p))));
    std::vector<std::string> patch_files = {"workers.yaml"};
    Node workers = Object("batch/v1", "Job", Node::Map().Add("name", Node::Str(names_.workers())));
    workers.Add(
        "spec",
        Node::Map()
            .Add("completions", Node::Int(p.workers))
            .Add("parallelism", Node::Int(p.workers))
            .Add("template",
                 Node::Map().Add(
                     "spec", Node::Map().Add("containers", ContainerPatch("worker", p.worker)))));
    (*files)[dir + "workers.yaml"] = yaml::Emit(workers);
    if (servers_) {
      patch_files.push_back("parameter-servers.yaml");
      Node ps = Object("batch/v1", "Job", Node::Map().Add("name", Node::Str(names_.ps())));
      ps.Add("spec",
             Node::Map()
                 .Add("completions", Node::Int(p.parameter_servers))
                 .Add("parallelism", Node::Int(p.parameter_servers))
                 .Add("template",
                      Node::Map().Add("spec",
                                      Node::Map().Add("containers", ContainerPatch("ps", p.ps)))));
      (*files)[dir + "parameter-servers.yaml"] = yaml::Emit(ps);
    }
    Node patches = Node::Seq();
    for (const std::string& f : patch_files) patches.Push(Node::Map().Add("path", Node::Str(f)));
    k.Add("patches", std::move(patches));
    (*files)[dir + "kustomization.yaml"] = yaml::Emit(k);
  }

  const v1::ResolvedJob& job_;
  const KubernetesNames& names_;
  const RenderOptions& options_;
  const ContainerPlan plan_;
  const bool servers_;
};

}  // namespace

Node KubernetesLabels(const KubernetesNames& names, const std::string& component) {
  Node labels = Node::Map();
  labels.Add("app.kubernetes.io/name", Node::Str("strata"));
  labels.Add("app.kubernetes.io/instance", Node::Str(names.prefix));
  if (!component.empty()) labels.Add("app.kubernetes.io/component", Node::Str(component));
  return labels;
}

absl::StatusOr<RenderedFiles> RenderKubernetes(const v1::ResolvedJob& job,
                                               const RenderOptions& options) {
  STRATA_ASSIGN_OR_RETURN(KubernetesNames names, MakeKubernetesNames(job.name()));
  return Builder(job, names, options).Render();
}

absl::StatusOr<KubernetesSubmission> RenderKubernetesSubmission(const v1::ResolvedJob& job,
                                                                const RenderOptions& options,
                                                                const std::string& overlay,
                                                                const std::string& run_token) {
  STRATA_ASSIGN_OR_RETURN(KubernetesNames names, MakeKubernetesNames(job.name()));
  return Builder(job, names, options).Submission(overlay, run_token);
}

int AddOwnerReferences(const OwnerJob& owner, std::vector<yaml::Node>* objects) {
  int added = 0;
  for (Node& object : *objects) {
    Node* metadata = object.Find("metadata");
    if (metadata == nullptr) continue;
    const Node* annotations = metadata->Find("annotations");
    const Node* named = annotations ? annotations->Find(kOwnerAnnotation) : nullptr;
    if (named == nullptr || named->scalar() != yaml::QuoteScalar(owner.name)) continue;
    Node reference = Node::Map();
    reference.Add("apiVersion", Node::Str("batch/v1"))
        .Add("kind", Node::Str("Job"))
        .Add("name", Node::Str(owner.name))
        .Add("uid", Node::Str(owner.uid))
        .Add("controller", Node::Bool(false))
        .Add("blockOwnerDeletion", Node::Bool(true));
    // Deleting the Job deletes this object; foreground deletion waits for it.
    if (Node* references = metadata->Find("ownerReferences")) {
      references->Push(std::move(reference));
    } else {
      metadata->Add("ownerReferences", Node::Seq().Push(std::move(reference)));
    }
    ++added;
  }
  return added;
}

}  // namespace strata
