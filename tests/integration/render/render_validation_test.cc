// `strata render` as a user runs it, and the rendered files as the tools that apply them read
// them, all offline: `docker-compose config -q` (docker-compose v1, no daemon), `kubectl
// kustomize` (no API server) and scripts/k8s-validate/validate.mjs (the Kubernetes API types, with
// unknown fields refused). Each validator is also shown a broken file, so a pass means something.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/integration/orchestrator/cli_test_util.h"
#include "tests/integration/render/kustomize_build.h"
#include "tests/support/ci.h"

namespace strata::testing {
namespace {

std::string Source() { return STRATA_TEST_SOURCE_DIR; }

const std::vector<std::string>& Jobs() {
  static const std::vector<std::string> jobs = {Source() + "/configs/quickstart.yaml",
                                                Source() + "/tests/data/render/ps-stragglers.yaml",
                                                Source() + "/tests/data/render/allreduce.yaml"};
  return jobs;
}

bool Have(const std::string& tool) { return RunCommand("command -v " + tool).exit_code == 0; }

// A temporary directory, removed with everything in it when the test is done.
struct ScopedDir {
  explicit ScopedDir(const std::string& tag) : path(MakeTempDir(tag)) {}
  ~ScopedDir() { std::filesystem::remove_all(path); }
  const std::string path;
};

// Renders into `out`, which it returns; `flags` are more options of `strata render`.
std::string Render(const std::string& job, const std::string& launcher, const std::string& out,
                   const std::string& flags = "") {
  const CommandResult r = RunCommand(Strata() + " render " + job + " --launcher " + launcher +
                                     " --out " + out + " " + flags);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return out;
}

// No daemon is needed or contacted: the socket does not exist.
CommandResult ComposeConfig(const std::string& dir) {
  return RunCommand("cd " + dir +
                    " && DOCKER_HOST=unix:///nonexistent.sock docker-compose -f "
                    "docker-compose.yml config -q");
}

std::string Validator() { return Source() + "/scripts/k8s-validate"; }

bool HaveSchemaCheck() {
  return Have("node") && Exists(Validator() + "/node_modules/kubernetes-models/package.json") &&
         Exists(Validator() + "/node_modules/@kubernetes/client-node/package.json");
}

TEST(RenderCli, BadInputExitsTwoWithAClearMessage) {
  const std::string job = Jobs()[0];
  const ScopedDir scoped("render-bad");
  const std::string& tmp = scoped.path;
  struct Case {
    std::string args, message;
  };
  WriteText(tmp + "/a-file", "");
  for (const Case& c : std::vector<Case>{
           {job + " --launcher swarm --out " + tmp + "/x", "unknown launcher 'swarm'"},
           {job + " --launcher compose --out " + tmp + "/a-file/sub",
            "cannot create the output directory " + tmp + "/a-file/sub"},
           {job + " --launcher kubernetes --out /proc/strata-render",
            "cannot create the output directory /proc/strata-render"},
           {tmp + "/missing.yaml --launcher compose --out " + tmp + "/x", "missing.yaml"},
           {job + " --launcher compose --out " + tmp + "/x --set cluster.workers=0",
            "cluster.workers"},
           {job + " --launcher kubernetes --out " + tmp +
                "/x --set cluster.parameter_servers=50 --set strategy.ps_split=false",
            "cluster.parameter_servers"},
           {job + " --out " + tmp + "/x", "--launcher is required"},
           {job + " --launcher kubernetes --out " + tmp + "/x --with-prometheus",
            "--with-prometheus is for --launcher compose"},
           {job + " --launcher compose --out " + tmp + "/x --service-monitor",
            "--service-monitor is for --launcher kubernetes"},
           {job + " --launcher compose --out " + tmp + "/x --with-prometheus --set " +
                "metrics.enabled=false",
            "the job serves no metrics"},
       }) {
    const CommandResult r = RunCommand(Strata() + " render " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.args << "\n" << r.output;
  }
  EXPECT_FALSE(Exists(tmp + "/x")) << "a refused render wrote files";
}

TEST(RenderCompose, DockerComposeAcceptsEveryCaseWithoutWarnings) {
  if (!Have("docker-compose")) {
    STRATA_UNAVAILABLE(
        "docker-compose is not installed (scripts/install-deps.sh installs it); the compose files "
        "were not checked");
  }
  for (const std::string& job : Jobs())
    for (const std::string flags : {"", "--with-prometheus"}) {
      const ScopedDir scoped("render-compose");
      const std::string dir = Render(job, "compose", scoped.path, flags);
      const CommandResult r = ComposeConfig(dir);
      EXPECT_EQ(r.exit_code, 0) << job << "\n" << r.output;
      // Keys compose v1 ignores outside a swarm (configs, deploy) only warn: refuse them too.
      EXPECT_EQ(r.output, "") << job;
    }
}

TEST(RenderCompose, DockerComposeRefusesABrokenFile) {
  if (!Have("docker-compose")) STRATA_UNAVAILABLE("docker-compose is not installed");
  const ScopedDir scoped("render-compose");
  const std::string dir = Render(Jobs()[0], "compose", scoped.path);
  std::string text = Slurp(dir + "/docker-compose.yml");
  text.replace(text.find("    restart: \"no\""), 0, "    restartt: \"no\"\n");
  WriteText(dir + "/docker-compose.yml", text);
  EXPECT_NE(ComposeConfig(dir).exit_code, 0);
}

// A run of this test that could not make the schema check does not pass: it builds with kubectl,
// then skips (fails under CI=true) saying the schema was not checked.
TEST(RenderKubernetes, KustomizeBuildsTheBaseAndBothOverlaysAndTheSchemaAccepts) {
  if (!Have("kubectl")) {
    STRATA_UNAVAILABLE(
        "kubectl is not installed (scripts/install-deps.sh installs Debian's "
        "kubernetes-client); nothing was checked");
  }
  const bool schema = HaveSchemaCheck();
  // With --service-monitor too: its Services, policy and ServiceMonitor (the operator's CRD types,
  // scripts/k8s-validate) in the base and both overlays; and with TLS (exec probes).
  for (const std::string& job : Jobs())
    for (const std::string flags : {"", "--service-monitor", "--set security.tls=mutual"}) {
      const ScopedDir scoped("render-kubernetes");
      const std::string dir = Render(job, "kubernetes", scoped.path, flags);
      // The token the user creates before applying (a test value; never rendered).
      WriteText(dir + "/base/run-token", "0123456789abcdef0123456789abcdef");
      std::string built_files;
      for (const std::string target : {"base", "overlays/small", "overlays/large"}) {
        const std::string built = dir + "/" + target + ".built.yaml";
        const CommandResult k = KustomizeBuild(dir, target);
        ASSERT_EQ(k.exit_code, 0) << job << " " << target << "\n" << k.output;
        WriteText(built, k.output);
        built_files += " " + built;
      }
      if (!schema) continue;
      // One Node process for the three builds: loading the models dominates its time.
      const CommandResult v = RunCommand("node " + Validator() + "/validate.mjs" + built_files);
      EXPECT_EQ(v.exit_code, 0) << job << " " << flags << "\n" << v.output;
      EXPECT_NE(v.output.find("object(s) valid"), std::string::npos) << v.output;
      if (flags == "--service-monitor") {
        EXPECT_NE(Slurp(dir + "/base.built.yaml").find("kind: ServiceMonitor"), std::string::npos);
      }
    }
  if (!schema) {
    STRATA_UNAVAILABLE(
        "built with kubectl kustomize, but the schema was not checked: node or "
        "scripts/k8s-validate/node_modules is missing (scripts/install-deps.sh)");
  }
}

// --with-prometheus's prometheus.yml as Prometheus reads it: `promtool check config` (Debian's
// prometheus package) accepts it for every case and refuses it broken. Prometheus itself runs in
// the compose project from an image this machine may not have (docs/deploy.md), so the test
// checks the configuration, not a scrape in containers.
TEST(RenderCompose, PromtoolAcceptsThePrometheusConfig) {
  if (!Have("promtool")) {
    STRATA_UNAVAILABLE(
        "promtool is not installed (Debian's prometheus package; scripts/install-deps.sh); the "
        "Prometheus configuration was not checked");
  }
  for (const std::string& job : Jobs()) {
    const ScopedDir scoped("render-prometheus");
    const std::string dir = Render(job, "compose", scoped.path, "--with-prometheus");
    const CommandResult r = RunCommand("promtool check config " + dir + "/prometheus.yml");
    EXPECT_EQ(r.exit_code, 0) << job << "\n" << r.output;
    EXPECT_NE(r.output.find("SUCCESS"), std::string::npos) << r.output;
  }
  // Broken on purpose: a scrape interval that is no duration.
  const ScopedDir scoped("render-prometheus");
  const std::string dir = Render(Jobs()[0], "compose", scoped.path, "--with-prometheus");
  std::string text = Slurp(dir + "/prometheus.yml");
  const std::string interval = "scrape_interval: \"5s\"";
  ASSERT_NE(text.find(interval), std::string::npos) << text;
  text.replace(text.find(interval), interval.size(), "scrape_interval: often");
  WriteText(dir + "/prometheus.yml", text);
  EXPECT_NE(RunCommand("promtool check config " + dir + "/prometheus.yml").exit_code, 0);
}

TEST(RenderKubernetes, TheSchemaCheckRefusesUnknownFieldsAndBadTypes) {
  if (!HaveSchemaCheck()) {
    STRATA_UNAVAILABLE(
        "node or scripts/k8s-validate/node_modules missing (scripts/install-deps.sh)");
  }
  const ScopedDir scoped("render-schema");
  const std::string& tmp = scoped.path;
  WriteText(tmp + "/bad.yaml",
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: x}\nspec:\n"
            "  replicas: two\n  serviceName: x\n  selector: {matchLabels: {a: b}}\n"
            "  template:\n    metadata: {labels: {a: b}}\n    spec:\n      containers:\n"
            "        - {name: c, image: i, readinessProbe: {grpc: {port: 1}, periodSecond: 5}}\n");
  const CommandResult v = RunCommand("node " + Validator() + "/validate.mjs " + tmp + "/bad.yaml");
  EXPECT_EQ(v.exit_code, 1) << v.output;
  EXPECT_NE(v.output.find("periodSecond: unknown field"), std::string::npos) << v.output;
  EXPECT_NE(v.output.find("replicas must be integer"), std::string::npos) << v.output;
  // A ServiceMonitor (the Prometheus operator's CRD types) with a numbered port and no selector.
  WriteText(tmp + "/bad-monitor.yaml",
            "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\n"
            "spec:\n  endpoints: [{port: 9464}]\n");
  const CommandResult m =
      RunCommand("node " + Validator() + "/validate.mjs " + tmp + "/bad-monitor.yaml");
  EXPECT_EQ(m.exit_code, 1) << m.output;
  EXPECT_NE(m.output.find("ServiceMonitor/x"), std::string::npos) << m.output;
}

}  // namespace
}  // namespace strata::testing
