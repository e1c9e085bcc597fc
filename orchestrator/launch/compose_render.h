// `strata render --launcher compose`: a docker-compose file (format 3.9, as docker-compose v1
// 1.29 reads it) for one job, beside the resolved job spec it mounts (docs/deploy.md). One-shot
// sharder first (`depends_on: condition: service_completed_successfully`, which 1.29 accepts in
// a 3.9 file), then the parameter servers and workers, the evaluator, and the orchestrator once
// every service answers its gRPC health check; one internal network; the run directory as a
// named volume on the containers that use it; the run token as a compose secret read from a file
// the user creates (never in the rendered files). Pure.
#pragma once

#include "orchestrator/launch/render_files.h"
#include "strata/v1/job.pb.h"

namespace strata {

// docker-compose.yml, job.yaml and .gitignore (which keeps the token file out of git).
RenderedFiles RenderCompose(const v1::ResolvedJob& job, const RenderOptions& options);

}  // namespace strata
