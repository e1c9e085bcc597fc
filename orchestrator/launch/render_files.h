// What `strata render` produces and how it lands on disk: a set of text files, relative path to
// contents, that the pure renderers (compose_render.h, kubernetes_render.h) build and
// WriteRenderedFiles writes. Keeping the files as values lets tests compare them with goldens
// without touching a disk.
#pragma once

#include <map>
#include <string>

#include <absl/status/status.h>

namespace strata {

// Relative path ("base/workers.yaml") to contents; ordered, so listings and diffs are stable.
using RenderedFiles = std::map<std::string, std::string>;

struct RenderOptions {
  std::string image = "strata:latest";  // one image holds every binary and the probe
  // Compose: a Prometheus service scraping the job, prometheus.yml beside docker-compose.yml
  // (compose_prometheus.h).
  bool with_prometheus = false;
  // Its image: any Prometheus 2.x (the configuration uses static targets only). Pinned, so that
  // a rendered project runs the same Prometheus tomorrow.
  std::string prometheus_image = "prom/prometheus:v2.53.1";
  // Kubernetes: a monitoring.coreos.com/v1 ServiceMonitor and the Services it selects, for
  // clusters with the Prometheus operator (kubernetes_monitoring.h).
  bool service_monitor = false;
};

// Writes every file under `out_dir` (created if missing), each atomically. Files of `out_dir`
// that are not in `files` are left alone. FailedPrecondition, naming the path, when `out_dir`
// cannot be created or written.
absl::Status WriteRenderedFiles(const std::string& out_dir, const RenderedFiles& files);

}  // namespace strata
