// What a job runs, before any launcher is involved: the steps that run to completion (sharding the
// data, the initial model of a pure ps job) and the services with their role flags — parameter
// servers for ps and switch jobs, one worker per rank with its shard, and the evaluator — in the
// order they start. Pure: built from the resolved job and the run directory's layout alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orchestrator/launch/launcher.h"
#include "services/common/base/run_directory.h"
#include "services/common/config/resolved_job.h"

namespace strata {

TaskSpec ShardTask(const RunPaths& paths);
// Writes the model a worker would build from the job's seed to `checkpoint`.
TaskSpec InitCheckpointTask(const RunPaths& paths, const std::string& checkpoint);

struct ServicePlanInputs {
  std::string init_checkpoint;  // ps jobs: where the servers' initial model is; else empty
  // launcher.ring_transport unix: worker r's ring listens on this prefix followed by r.
  std::string ring_socket_prefix;
  // security.tls on or mutual: the directory of the run's certificates (security.tls_dir made
  // absolute, or the one `strata run` made); every service gets --tls, --tls-dir and
  // --tls-server-name.
  std::string tls_dir;
};

std::vector<ServiceSpec> PlanServices(const v1::ResolvedJob& job, const RunPaths& paths,
                                      const ServicePlanInputs& inputs);

}  // namespace strata
