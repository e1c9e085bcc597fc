// The run directory (docs/user-guide.md), one place that names its files.
#pragma once

#include <string>

#include "services/common/base/run_paths.h"

namespace strata {

struct RunPaths {
  explicit RunPaths(std::string dir)
      : root(std::move(dir)),
        job_yaml(root + "/job.yaml"),
        job_resolved(root + "/job.resolved.txtpb"),
        shards(root + "/shards"),
        checkpoints(root + "/checkpoints"),
        logs(root + "/logs"),
        ports(root + "/ports"),
        metrics(root + "/metrics.jsonl"),
        events(root + "/events.jsonl"),
        summary(root + "/summary.json"),
        report(root + "/report.html"),
        status(root + "/status.json"),
        switch_request(root + "/switch.request"),
        pdp_rounds(root + "/" + kPdpRoundsFile),
        tls(root + "/tls") {}

  std::string root;
  std::string job_yaml;        // resolved spec, defaults filled in
  // The resolved job every service reads (services/common/config/resolved_job.h).
  std::string job_resolved;
  std::string shards;          // manifest.json + shard-<rank>.idx
  std::string checkpoints;     // switch-step<S>.ckpt, init.ckpt
  std::string logs;            // one log per service
  std::string ports;           // port files of the services
  std::string metrics;         // one line per evaluation
  std::string events;          // launches, switch, failures
  std::string summary;         // written when the run ends
  std::string report;          // charts
  std::string status;          // live state, rewritten about once a second while running
  std::string switch_request;  // `strata switch` drops it; the running orchestrator acts on it
  std::string pdp_rounds;      // pdp and apdp: partition 0's server records each round
  // security.tls without tls_dir: the run's own CA certificate and the services' certificates and
  // keys (mode 0700), removed when the run ends
  std::string tls;
};

}  // namespace strata
