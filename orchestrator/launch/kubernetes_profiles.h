// The sizes of a job rendered for Kubernetes (`strata render --launcher kubernetes`): the base
// (the job's own replica counts, a worker's cores from cluster.threads_per_worker) and the
// overlays/small and overlays/large variants, as replica counts and each container's requests and
// limits. Pure.
#pragma once

#include <string>

#include "strata/v1/job.pb.h"

namespace strata {

// Requests and limits of one container.
struct Resources {
  std::string cpu_request, cpu_limit, memory_request, memory_limit;
};

struct Profile {
  int workers = 0;
  int parameter_servers = 0;
  Resources worker, ps;
};

Profile BaseProfile(const v1::ResolvedJob& job);
// Half the workers (at least one), one server, half a worker's cores requested.
Profile SmallProfile(const v1::ResolvedJob& job);
// Twice the workers and servers (no more servers than the model has tensors), more memory.
Profile LargeProfile(const v1::ResolvedJob& job);

}  // namespace strata
