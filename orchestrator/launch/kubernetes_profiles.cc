#include "orchestrator/launch/kubernetes_profiles.h"

#include <algorithm>

#include "orchestrator/launch/container_plan.h"
#include "services/common/config/resolved_job.h"

namespace strata {

namespace {

Resources WorkerResources(double cpus, const std::string& memory_request,
                          const std::string& memory_limit) {
  return {CpuQuantity(cpus), CpuQuantity(cpus), memory_request, memory_limit};
}

}  // namespace

Profile BaseProfile(const v1::ResolvedJob& job) {
  Profile p;
  p.workers = job.cluster().workers();
  p.parameter_servers = job.cluster().parameter_servers();
  // cluster.threads_per_worker cores each: the worker's intra-op threads, no more, no less.
  p.worker = WorkerResources(job.training().threads_per_worker(), "1Gi", "2Gi");
  p.ps = {"500m", "1", "512Mi", "1Gi"};
  return p;
}

Profile SmallProfile(const v1::ResolvedJob& job) {
  Profile p = BaseProfile(job);
  p.workers = std::max(1, job.cluster().workers() / 2);
  p.parameter_servers = 1;
  p.worker = {CpuQuantity(job.training().threads_per_worker() / 2.0),
              CpuQuantity(job.training().threads_per_worker()), "512Mi", "1Gi"};
  p.ps = {"250m", "1", "256Mi", "512Mi"};
  return p;
}

Profile LargeProfile(const v1::ResolvedJob& job) {
  Profile p = BaseProfile(job);
  p.workers = job.cluster().workers() * 2;
  p.parameter_servers = job.cluster().parameter_servers() * 2;
  // No more servers than tensors to partition where tensors are dealt out whole (job_checks.h).
  if (auto tensors = BuiltinModelTensors(job.arch()); tensors && !job.strategy().ps_split()) {
    p.parameter_servers = std::min(p.parameter_servers, *tensors);
  }
  p.worker = WorkerResources(job.training().threads_per_worker(), "2Gi", "4Gi");
  p.ps = {"1", "2", "1Gi", "2Gi"};
  return p;
}

}  // namespace strata
