#include "orchestrator/launch/compose_prometheus.h"

#include <absl/strings/str_cat.h>

namespace strata {

using yaml::Node;

std::string ComposePrometheusConfig(const v1::ResolvedJob& job, const ContainerPlan& plan) {
  Node targets = Node::Seq();
  for (const ContainerSpec& c : plan.containers) {
    if (c.metrics_port == 0) continue;
    Node group = Node::Map();
    group.Add("targets", Node::Strs({absl::StrCat(c.name, ":", c.metrics_port)}).Flow());
    group.Add("labels", Node::Map().Add("service", Node::Str(c.name)).Flow());
    targets.Push(std::move(group));
  }
  Node scrape = Node::Map();
  scrape.Add("job_name", Node::Str("strata"));
  scrape.Add("static_configs", std::move(targets),
             "Every container that serves /metrics, by its service name on the job's network.");
  Node doc = Node::Map();
  doc.Comment(absl::StrCat(
      "Prometheus for job '", job.name(), "', written by `strata render --launcher compose\n",
      "--with-prometheus` beside docker-compose.yml, which mounts it read-only into the\n",
      "prometheus service. Render again rather than editing it. See docs/user-guide.md,\n",
      "\"Watching a job\"."));
  // Often enough to see a phase of a short job; a scrape is one small HTTP answer per service.
  doc.Add("global", Node::Map()
                        .Add("scrape_interval", Node::Str("5s"))
                        .Add("scrape_timeout", Node::Str("5s"))
                        .Add("evaluation_interval", Node::Str("5s")));
  doc.Add("scrape_configs", Node::Seq().Push(std::move(scrape)));
  return yaml::Emit(doc);
}

Node ComposePrometheusService(const RenderOptions& options, const std::string& network) {
  const std::string tsdb = "/prometheus";
  Node s = Node::Map();
  s.Add("image", Node::Str(options.prometheus_image));
  s.Add("command",
        Node::Strs({absl::StrCat("--config.file=/etc/prometheus/", kComposePrometheusConfig),
                    absl::StrCat("--storage.tsdb.path=", tsdb),
                    absl::StrCat("--web.listen-address=0.0.0.0:", kPrometheusPort)}));
  s.Add("volumes",
        Node::Strs({absl::StrCat("./", kComposePrometheusConfig, ":/etc/prometheus/",
                                 kComposePrometheusConfig, ":ro"),
                    absl::StrCat(kComposePrometheusVolume, ":", tsdb)}),
        "Its configuration read-only; its time series in a volume of their own.");
  s.Add("networks", Node::Strs({network, kComposePrometheusNetwork}));
  s.Add("ports", Node::Strs({absl::StrCat("127.0.0.1:", kPrometheusPort, ":", kPrometheusPort)}),
        "The web UI and HTTP API on this machine's loopback only.");
  // Hardened as the job's services are. The image runs Prometheus as nobody, who owns the
  // volume's mount point there, so nothing needs a capability.
  s.Add("read_only", Node::Bool(true));
  s.Add("tmpfs", Node::Strs({"/tmp:size=64m"}));
  s.Add("cap_drop", Node::Strs({"ALL"}).Flow());
  s.Add("security_opt", Node::Strs({"no-new-privileges:true"}).Flow());
  s.Add("pids_limit", Node::Int(1024));
  s.Add("mem_limit", Node::Str("1g"));
  s.Add("restart", Node::Str("no"));
  return s;
}

}  // namespace strata
