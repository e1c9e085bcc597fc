// `strata render --launcher kubernetes`: a kustomize base and two overlays for one job
// (docs/deploy.md). base/: the job spec as a ConfigMap, the replica counts as a second ConfigMap
// (`<job>-topology`, which the overlays change), the parameter servers as an Indexed Job
// (partition = JOB_COMPLETION_INDEX) behind a headless Service, the workers as an Indexed Job (rank
// = JOB_COMPLETION_INDEX) with a headless Service for the ring, the evaluator as a Pod behind a
// Service, the orchestrator as a Job whose init container is the sharder, the run directory as a
// ReadWriteMany claim, a NetworkPolicy that admits only the job's own pods, and the run token as a
// Secret generated from a file the user creates (never in the rendered files). overlays/small and
// overlays/large change the replica counts and resources. Owner references need the orchestrator
// Job's UID, which exists only once the Job is created: the owned objects carry an annotation
// naming their owner, which `strata submit` turns into an owner reference (AddOwnerReferences); by
// hand, `kubectl delete -k` removes the lot. Pure.
#pragma once

#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "orchestrator/launch/container_plan.h"
#include "orchestrator/launch/render_files.h"
#include "orchestrator/launch/yaml_text.h"
#include "strata/v1/job.pb.h"

namespace strata {

// The annotation on every object the orchestrator Job owns once submitted.
inline constexpr char kOwnerAnnotation[] = "strata.dev/owner-job";

// The labels of every object of the job (app.kubernetes.io/name, instance) and, unless
// `component` is empty, of one component's (app.kubernetes.io/component: ps, worker, ...).
yaml::Node KubernetesLabels(const KubernetesNames& names, const std::string& component);

// InvalidArgument when the job's name leaves nothing for object names.
absl::StatusOr<RenderedFiles> RenderKubernetes(const v1::ResolvedJob& job,
                                               const RenderOptions& options);

// The objects of one run as `strata submit` creates them (docs/deploy.md, "strata submit"): what
// `kubectl kustomize` builds from base/ or an overlay of the rendered files, except that the
// generated ConfigMaps and Secret keep their plain names (no content hash) and the Secret holds
// `run_token` itself. Every object to be owned carries kOwnerAnnotation.
struct KubernetesSubmission {
  std::string job_name;  // the orchestrator Job, "<job>-orchestrator"
  std::string instance;  // the label app.kubernetes.io/instance of every object: "<job>"
  // The orchestrator Job, with `spec.suspend: true`: created first (its UID is the owner of the
  // rest) and resumed once everything it needs exists.
  yaml::Node job = yaml::Node::Map();
  // The run volume's claim: not owned (the run record outlives the run).
  yaml::Node run_volume = yaml::Node::Map();
  // Everything else: ConfigMaps, the Secret, Services, the servers, the workers, the evaluator
  // and the NetworkPolicy, in the order they are created.
  std::vector<yaml::Node> owned;
};

// `overlay`: "" (base/), "small" or "large"; InvalidArgument for any other, or when the job's
// name leaves nothing for object names.
absl::StatusOr<KubernetesSubmission> RenderKubernetesSubmission(const v1::ResolvedJob& job,
                                                                const RenderOptions& options,
                                                                const std::string& overlay,
                                                                const std::string& run_token);

// The Job that owns a submission's objects once it exists.
struct OwnerJob {
  std::string name;
  std::string uid;
};

// Adds an owner reference to `owner` (apiVersion batch/v1, kind Job, controller false,
// blockOwnerDeletion true) to every object whose kOwnerAnnotation names `owner.name`, so that
// deleting the Job deletes them through the garbage collector. Returns how many it marked.
int AddOwnerReferences(const OwnerJob& owner, std::vector<yaml::Node>* objects);

}  // namespace strata
