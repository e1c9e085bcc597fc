// `strata render --launcher kubernetes --service-monitor`: base/monitoring.yaml, for clusters that
// run the Prometheus operator (docs/deploy.md, "Metrics"). Per component that serves metrics
// (ps, worker, evaluator) a headless Service, labelled strata.dev/metrics, selecting its pods and
// naming their `metrics` port; one monitoring.coreos.com/v1 ServiceMonitor selecting those
// Services, so that the operator's Prometheus scrapes every pod of the job at /metrics; and a
// NetworkPolicy admitting Prometheus's pods (app.kubernetes.io/name: prometheus, in any
// namespace) to the metrics port alone, which the job's own policy would otherwise refuse. The
// objects carry the job's labels and the owner annotation as the others do. Pure.
#pragma once

#include <vector>

#include "orchestrator/launch/container_plan.h"
#include "orchestrator/launch/yaml_text.h"

namespace strata {

// The label that marks the metrics Services, and what the ServiceMonitor selects.
inline constexpr char kMetricsServiceLabel[] = "strata.dev/metrics";

// The objects of base/monitoring.yaml, each component's Service first; empty when no container
// serves metrics (metrics.enabled false).
std::vector<yaml::Node> KubernetesMonitoringObjects(const KubernetesNames& names,
                                                    const ContainerPlan& plan);

}  // namespace strata
