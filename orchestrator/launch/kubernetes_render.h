// `strata render --launcher kubernetes`: a kustomize base and two overlays for one job
// (docs/deploy.md). base/: the job spec as a ConfigMap, the replica counts as a second ConfigMap
// (`<job>-topology`, which the overlays change), the parameter servers as a StatefulSet behind a
// headless Service, the workers as an Indexed Job (rank = JOB_COMPLETION_INDEX) with a headless
// Service for the ring, the evaluator as a Pod behind a Service, the orchestrator as a Job whose
// init container is the sharder, the run directory as a ReadWriteMany claim, a NetworkPolicy
// that admits only the job's own pods, and the run token as a Secret generated from a file the
// user creates (never in the rendered files). overlays/small and overlays/large change the
// replica counts and resources. Owner references need the orchestrator Job's UID, which exists
// only once the Job is created: the owned objects carry an annotation naming their owner for
// `strata submit` to fill in; by hand, `kubectl delete -k` removes the lot. Pure.
#pragma once

#include <absl/status/statusor.h>

#include "orchestrator/launch/render_files.h"
#include "services/common/job_spec.h"

namespace strata {

// The annotation on every object the orchestrator Job owns once submitted.
inline constexpr char kOwnerAnnotation[] = "strata.dev/owner-job";

// InvalidArgument when the job's name leaves nothing for object names.
absl::StatusOr<RenderedFiles> RenderKubernetes(const JobSpec& spec, const RenderOptions& options);

}  // namespace strata
