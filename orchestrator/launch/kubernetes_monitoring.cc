#include "orchestrator/launch/kubernetes_monitoring.h"

#include <string>

#include <absl/strings/str_cat.h>

#include "orchestrator/launch/kubernetes_render.h"

namespace strata {
namespace {

using yaml::Node;

// The component label of a role's pods, as kubernetes_render.cc sets it.
const char* Component(ContainerRole role) {
  switch (role) {
    case ContainerRole::kParameterServer:
      return "ps";
    case ContainerRole::kWorker:
      return "worker";
    case ContainerRole::kEvaluator:
      return "evaluator";
    default:
      return "";
  }
}

Node Metadata(const KubernetesNames& names, const std::string& name, Node labels) {
  return Node::Map()
      .Add("name", Node::Str(name))
      .Add("labels", std::move(labels))
      .Add("annotations", Node::Map().Add(kOwnerAnnotation, Node::Str(names.orchestrator())),
           "`strata submit` turns this into an owner reference once the Job has a UID.");
}

Node Object(const std::string& api, const std::string& kind, Node metadata) {
  return Node::Map()
      .Add("apiVersion", Node::Str(api))
      .Add("kind", Node::Str(kind))
      .Add("metadata", std::move(metadata));
}

Node MetricsService(const KubernetesNames& names, const std::string& component, int port) {
  Node labels = KubernetesLabels(names, component);
  labels.Add(kMetricsServiceLabel, Node::Str("true"));
  Node o = Object(
      "v1", "Service",
      Metadata(names, absl::StrCat(names.prefix, "-", component, "-metrics"), std::move(labels)));
  Node spec = Node::Map();
  spec.Add("clusterIP", Node::Str("None"),
           "Headless: the operator's Prometheus scrapes each pod behind it, not a virtual IP.");
  spec.Add("selector", KubernetesLabels(names, component));
  spec.Add("ports", Node::Seq().Push(Node::Map()
                                         .Add("name", Node::Str("metrics"))
                                         .Add("port", Node::Int(port))
                                         .Add("targetPort", Node::Str("metrics"))));
  o.Add("spec", std::move(spec));
  return o;
}

Node ServiceMonitor(const KubernetesNames& names) {
  Node o = Object("monitoring.coreos.com/v1", "ServiceMonitor",
                  Metadata(names, names.prefix, KubernetesLabels(names, "")));
  o.Comment(
      "For the Prometheus operator: its Prometheus must select this ServiceMonitor (by default\n"
      "it selects those labelled as its Helm release, e.g. release: kube-prometheus-stack; add\n"
      "that label here or set serviceMonitorSelector). See docs/deploy.md.");
  Node match = KubernetesLabels(names, "");
  match.Add(kMetricsServiceLabel, Node::Str("true"));
  Node spec = Node::Map();
  spec.Add("selector", Node::Map().Add("matchLabels", std::move(match)));
  Node endpoint = Node::Map()
                      .Add("port", Node::Str("metrics"))
                      .Add("path", Node::Str("/metrics"))
                      .Add("scheme", Node::Str("http"))
                      .Add("interval", Node::Str("15s"));
  spec.Add("endpoints", Node::Seq().Push(std::move(endpoint)));
  // The pod's component and instance labels on every series, beside the operator's own.
  spec.Add("podTargetLabels",
           Node::Strs({"app.kubernetes.io/instance", "app.kubernetes.io/component"}));
  o.Add("spec", std::move(spec));
  return o;
}

Node ScrapePolicy(const KubernetesNames& names, int port) {
  Node o = Object("networking.k8s.io/v1", "NetworkPolicy",
                  Metadata(names, names.prefix + "-metrics-scrape", KubernetesLabels(names, "")));
  o.Comment(
      "The job's own policy admits only its pods; this one adds Prometheus's pods, from any\n"
      "namespace, to the metrics port and nothing else (policies add up).");
  Node spec = Node::Map();
  spec.Add("podSelector", Node::Map().Add("matchLabels", KubernetesLabels(names, "")));
  spec.Add("policyTypes", Node::Strs({"Ingress"}));
  Node from = Node::Map()
                  .Add("namespaceSelector", Node::Map())
                  .Add("podSelector",
                       Node::Map().Add("matchLabels", Node::Map().Add("app.kubernetes.io/name",
                                                                      Node::Str("prometheus"))));
  Node rule = Node::Map();
  rule.Add("from", Node::Seq().Push(std::move(from)));
  rule.Add(
      "ports",
      Node::Seq().Push(Node::Map().Add("protocol", Node::Str("TCP")).Add("port", Node::Int(port))));
  spec.Add("ingress", Node::Seq().Push(std::move(rule)));
  o.Add("spec", std::move(spec));
  return o;
}

}  // namespace

std::vector<Node> KubernetesMonitoringObjects(const KubernetesNames& names,
                                              const ContainerPlan& plan) {
  std::vector<Node> objects;
  int port = 0;
  for (const ContainerSpec& c : plan.containers) {
    const std::string component = Component(c.role);
    if (c.metrics_port == 0 || component.empty()) continue;
    objects.push_back(MetricsService(names, component, c.metrics_port));
    port = c.metrics_port;
  }
  if (objects.empty()) return objects;
  objects.push_back(ServiceMonitor(names));
  objects.push_back(ScrapePolicy(names, port));
  return objects;
}

}  // namespace strata
