// `strata render --launcher compose --with-prometheus`: a Prometheus service in the rendered
// project, scraping every container that serves metrics (metrics.enabled, on metrics.port) by its
// service name on the project's network, with its configuration in prometheus.yml beside
// docker-compose.yml (docs/user-guide.md, "Watching a job"). The service is hardened as the
// others are (read-only root, no capabilities, no new privileges, bounds on processes and
// memory); its time series go to a volume of their own, the one place it writes. It alone joins
// a second, ordinary network as well, so that its web UI can be published on the host's
// loopback: the job's own network is internal, and Docker publishes no port of a container that
// is only on internal networks. Pure.
#pragma once

#include <string>

#include "orchestrator/launch/container_plan.h"
#include "orchestrator/launch/render_files.h"
#include "orchestrator/launch/yaml_text.h"

namespace strata {

inline constexpr char kComposePrometheusService[] = "prometheus";
inline constexpr char kComposePrometheusConfig[] = "prometheus.yml";
inline constexpr char kComposePrometheusVolume[] = "prometheus-data";
inline constexpr char kComposePrometheusNetwork[] = "prometheus-ui";
inline constexpr int kPrometheusPort = 9090;

// prometheus.yml: one static target per container with a metrics port (service:port, labelled
// with the service), scraped every 5 s.
std::string ComposePrometheusConfig(const v1::ResolvedJob& job, const ContainerPlan& plan);

// The compose service running `options.prometheus_image` with that configuration; `network` is
// the job's internal network.
yaml::Node ComposePrometheusService(const RenderOptions& options, const std::string& network);

}  // namespace strata
