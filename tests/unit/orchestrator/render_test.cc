// `strata render`, without writing anything but goldens on request: the YAML builder, the
// container plan, and both renderers against the files kept in the repository (deploy/ for
// configs/quickstart.yaml, tests/data/render/<case>/ for the other cases). After an intended
// change, regenerate every golden with (docs/deploy.md):
//   STRATA_UPDATE_GOLDENS=1 build/bin/strata_orchestrator_unit_tests
//   --gtest_filter='*RenderGolden*'
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <absl/strings/str_join.h>
#include <yaml-cpp/yaml.h>

#include "orchestrator/launch/compose_render.h"
#include "orchestrator/launch/container_plan.h"
#include "orchestrator/launch/kubernetes_render.h"
#include "orchestrator/launch/service_plan.h"
#include "orchestrator/launch/yaml_text.h"
#include "services/common/base/run_directory.h"
#include "services/common/config/job_spec.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using yaml::Node;

std::string Source(const std::string& relative) {
  return std::string(STRATA_TEST_SOURCE_DIR) + "/" + relative;
}

std::string Slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

v1::ResolvedJob LoadCase(const std::string& relative) {
  auto job = LoadJobSpec(Source(relative));
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *job : v1::ResolvedJob();
}

TEST(YamlText, QuotesOnlyWhatPlainStyleWouldMisread) {
  EXPECT_EQ(yaml::QuoteScalar("strata:latest"), "strata:latest");
  EXPECT_EQ(yaml::QuoteScalar("--listen"), "--listen");
  EXPECT_EQ(yaml::QuoteScalar("ps-0:50051"), "ps-0:50051");
  EXPECT_EQ(yaml::QuoteScalar("50051"), "\"50051\"");
  EXPECT_EQ(yaml::QuoteScalar("500m"), "\"500m\"");
  EXPECT_EQ(yaml::QuoteScalar("-1"), "\"-1\"");
  EXPECT_EQ(yaml::QuoteScalar(".5"), "\".5\"");
  EXPECT_EQ(yaml::QuoteScalar("no"), "\"no\"");
  EXPECT_EQ(yaml::QuoteScalar("Off"), "\"Off\"");
  EXPECT_EQ(yaml::QuoteScalar("null"), "\"null\"");
  EXPECT_EQ(yaml::QuoteScalar(""), "\"\"");
  EXPECT_EQ(yaml::QuoteScalar("a: b"), "\"a: b\"");
  EXPECT_EQ(yaml::QuoteScalar("key:"), "\"key:\"");
  EXPECT_EQ(yaml::QuoteScalar("x # y"), "\"x # y\"");
  EXPECT_EQ(yaml::QuoteScalar("-"), "\"-\"");
  EXPECT_EQ(yaml::QuoteScalar("say \"hi\"\\"), "\"say \\\"hi\\\"\\\\\"");
  EXPECT_EQ(yaml::QuoteScalar("[x]"), "\"[x]\"");
}

TEST(YamlText, BlockLayoutWithCommentsLiteralsAndFlow) {
  Node doc = Node::Map();
  doc.Comment("top\nsecond line");
  doc.Add("name", Node::Str("a"));
  doc.Add("count", Node::Int(3), "a count");
  doc.Add("f", Node::Num(0.25));
  doc.Add("whole", Node::Num(2));
  doc.Add("cmd", Node::Strs({"/bin/sh", "-c"}).Flow());
  doc.Add("script", Node::Str("set -eu\n\nexec x\n"));
  doc.Add("empty", Node::Map());
  Node items = Node::Seq();
  items.Push(Node::Map().Add("k", Node::Str("v")).Add("l", Node::Bool(true)));
  items.Push(Node::Str("plain"), "an item");
  doc.Add("items", std::move(items));
  EXPECT_EQ(yaml::Emit(doc),
            "# top\n# second line\n"
            "name: a\n"
            "# a count\n"
            "count: 3\n"
            "f: 0.25\n"
            "whole: 2\n"
            "cmd: [/bin/sh, -c]\n"
            "script: |\n  set -eu\n\n  exec x\n"
            "empty: {}\n"
            "items:\n"
            "  - k: v\n"
            "    l: true\n"
            "  # an item\n"
            "  - plain\n");
  EXPECT_EQ(yaml::EmitAll({Node::Map().Add("a", Node::Int(1)), Node::Map().Add("b", Node::Int(2))}),
            "a: 1\n---\nb: 2\n");
}

TEST(ContainerPlan, ShellWordsCpuQuantitiesAndNames) {
  EXPECT_EQ(ShellWord("--run-dir"), "--run-dir");
  EXPECT_EQ(ShellWord("${TRAIN_EXAMPLES}"), "\"${TRAIN_EXAMPLES}\"");
  EXPECT_EQ(ShellWord("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellWord(""), "''");
  EXPECT_EQ(CpuQuantity(2), "2");
  EXPECT_EQ(CpuQuantity(0.25), "250m");
  EXPECT_EQ(CpuQuantity(1.5), "1500m");
  auto names = MakeKubernetesNames("PS_Stragglers-Demo");
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(names->prefix, "ps-stragglers-demo");
  EXPECT_EQ(names->workers(), "ps-stragglers-demo-worker");
  EXPECT_FALSE(MakeKubernetesNames("___").ok());
  EXPECT_LE(MakeKubernetesNames(std::string(100, 'a'))->prefix.size(), 40u);
}

TEST(ContainerPlan, ComposeUsesTheServicePlanWithFixedPorts) {
  const ContainerPlan plan =
      PlanComposeContainers(LoadCase("tests/data/render/ps-stragglers.yaml"));
  std::vector<std::string> names;
  for (const ContainerSpec& c : plan.containers) names.push_back(c.name);
  EXPECT_EQ(absl::StrJoin(names, " "),
            "sharder ps-0 ps-1 worker-0 worker-1 worker-2 evaluator orchestrator");
  EXPECT_EQ(plan.job.launcher().kind(), v1::LAUNCHER_KIND_COMPOSE);
  EXPECT_EQ(plan.job.launcher().ring_transport(), v1::RING_TRANSPORT_TCP);
  const ContainerSpec& ps1 = plan.containers[2];
  EXPECT_NE(ps1.script.find("--listen 0.0.0.0:50051"), std::string::npos) << ps1.script;
  EXPECT_NE(ps1.script.find("--partition 1"), std::string::npos);
  // The training-set size and the budget are the server's to read from the run directory.
  EXPECT_EQ(ps1.script.find("--train-examples"), std::string::npos);
  EXPECT_EQ(ps1.script.find("--sample-budget"), std::string::npos);
  EXPECT_NE(ps1.script.find("--run-dir /run/strata"), std::string::npos);
  EXPECT_EQ(ps1.cpus, 0.5);                  // cluster.cpu.parameter_server
  EXPECT_EQ(plan.containers[3].cpus, 2);     // threads_per_worker
  EXPECT_EQ(plan.containers[5].cpus, 0.25);  // the straggler
  EXPECT_NE(plan.containers.back().script.find(
                "--parameter-servers ps-0:50051,ps-1:50051 \\\n  --workers "
                "worker-0:50051,worker-1:50051,worker-2:50051"),
            std::string::npos)
      << plan.containers.back().script;
}

// security.tls in compose: the one-shot step makes the run's certificates in the run volume before
// it resolves the job (which checks them), every service and every health check gets the same
// three flags, and a directory of the user's is bound read-only instead of made. (With the
// services' --tls-dir left empty, ComposeRun.MutualTlsCarriesTheWholeJobInContainers failed: every
// service exited 2 at start.)
TEST(ContainerPlan, ComposeCarriesTlsWithCertificatesOfTheRunOrOfTheUser) {
  v1::ResolvedJob job = LoadCase("tests/data/render/ps-stragglers.yaml");
  job.mutable_security()->set_tls(v1::TLS_MODE_MUTUAL);
  const ContainerPlan made = PlanComposeContainers(job);
  EXPECT_EQ(made.job.security().tls_dir(), "/run/strata/tls");
  EXPECT_TRUE(made.inputs.empty());
  const std::string& sharder = made.containers.front().script;
  const size_t certificates = sharder.find("[ -d /run/strata/tls ] || strata certificates");
  ASSERT_NE(certificates, std::string::npos) << sharder;
  EXPECT_LT(certificates, sharder.find("strata resolve")) << sharder;
  EXPECT_NE(sharder.find("--server-name strata"), std::string::npos) << sharder;
  for (const ContainerSpec& c : made.containers) {
    if (!c.serves) continue;
    EXPECT_NE(c.script.find("--tls mutual \\\n  --tls-dir /run/strata/tls \\\n  "
                            "--tls-server-name strata"),
              std::string::npos)
        << c.name << "\n" << c.script;
  }
  const RenderedFiles files = RenderCompose(job, RenderOptions{});
  const std::string& compose = files.at("docker-compose.yml");
  EXPECT_NE(compose.find("test: [CMD, strata-health, \"127.0.0.1:50051\", --deadline-s, \"8\", "
                         "--tls, mutual, --tls-dir, /run/strata/tls, --tls-server-name, strata]"),
            std::string::npos)
      << compose;

  job.mutable_security()->set_tls_dir("/home/me/tls");
  const ContainerPlan users = PlanComposeContainers(job);
  EXPECT_EQ(users.job.security().tls_dir(), "/inputs/tls");
  ASSERT_EQ(users.inputs.size(), 1u);
  EXPECT_EQ(users.inputs[0].host_path, "/home/me/tls");
  EXPECT_EQ(users.inputs[0].container_path, "/inputs/tls");
  EXPECT_EQ(users.containers.front().script.find("strata certificates"), std::string::npos);
}

// A Kubernetes template serves every instance of its role: any flag whose value differs between
// two instances in the service plan must be one the template fills in per pod.
TEST(ContainerPlan, KubernetesTemplatesCoverEveryPerInstanceFlag) {
  v1::ResolvedJob spec = LoadCase("tests/data/render/ps-stragglers.yaml");
  spec.mutable_launcher()->set_ring_transport(v1::RING_TRANSPORT_TCP);
  const std::vector<ServiceSpec> services = PlanServices(spec, RunPaths("/run/strata"), {});
  std::set<std::pair<int, std::string>> templated;
  for (const TemplatedFlag& f : KubernetesTemplatedFlags()) {
    templated.insert({static_cast<int>(f.role), f.flag});
  }
  auto check = [&](const ServiceSpec& a, const ServiceSpec& b, ContainerRole role) {
    ASSERT_EQ(a.args.size(), b.args.size()) << a.name << " vs " << b.name;
    for (size_t i = 1; i < a.args.size(); ++i) {
      if (a.args[i] == b.args[i]) continue;
      EXPECT_TRUE(templated.count({static_cast<int>(role), a.args[i - 1]}))
          << a.args[i - 1] << " differs between " << a.name << " and " << b.name
          << " but the Kubernetes template does not fill it in per pod";
    }
  };
  check(services[0], services[1], ContainerRole::kParameterServer);
  check(services[2], services[4], ContainerRole::kWorker);
}

TEST(RenderKubernetes, RefusesANameWithNothingLeftForObjects) {
  v1::ResolvedJob spec = DefaultJob();
  spec.set_name("__");
  EXPECT_FALSE(RenderKubernetes(spec, {}).ok());
}

TEST(Render, NoFileHoldsASecretValue) {
  for (const char* job : {"configs/quickstart.yaml", "tests/data/render/ps-stragglers.yaml"}) {
    const v1::ResolvedJob spec = LoadCase(job);
    RenderedFiles files = RenderCompose(spec, {});
    auto k8s = RenderKubernetes(spec, {});
    ASSERT_TRUE(k8s.ok());
    files.insert(k8s->begin(), k8s->end());
    const std::regex token("[0-9a-fA-F]{32}");
    for (const auto& [path, text] : files) {
      EXPECT_FALSE(std::regex_search(text, token)) << path;
      EXPECT_EQ(text.find("STRATA_RUN_TOKEN="), text.find("STRATA_RUN_TOKEN=$"))
          << path << ": the token is only ever read from the secret";
    }
  }
}

// Every pod of every case meets the Pod Security "restricted" level, and more: a read-only root
// filesystem, limits on every container, no service-account token. Seen to fail with the
// containers' securityContext left out.
TEST(RenderKubernetes, EveryPodMeetsTheRestrictedPodSecurityLevel) {
  for (const char* job : {"configs/quickstart.yaml", "tests/data/render/ps-stragglers.yaml",
                          "tests/data/render/allreduce.yaml"}) {
    SCOPED_TRACE(job);
    auto files = RenderKubernetes(LoadCase(job), {});
    ASSERT_TRUE(files.ok()) << files.status();
    int pods = 0;
    for (const auto& [path, text] : *files) {
      if (path.rfind("base/", 0) != 0 || path.find(".yaml") == std::string::npos) continue;
      for (const YAML::Node& doc : YAML::LoadAll(text)) {
        const std::string kind = doc["kind"] ? doc["kind"].as<std::string>() : "";
        YAML::Node spec;
        if (kind == "Pod") spec = doc["spec"];
        if (kind == "Job") spec = doc["spec"]["template"]["spec"];
        if (!spec.IsMap()) continue;  // a Service, a claim, a policy
        ++pods;
        const std::string where = path + ": " + doc["metadata"]["name"].as<std::string>("?");
        const YAML::Node security = spec["securityContext"];
        ASSERT_TRUE(security && security.IsMap()) << where;
        EXPECT_TRUE(security["runAsNonRoot"].as<bool>(false)) << where;
        EXPECT_GT(security["runAsUser"].as<int>(0), 0) << where;
        EXPECT_EQ(security["seccompProfile"]["type"].as<std::string>(""), "RuntimeDefault")
            << where;
        EXPECT_FALSE(spec["automountServiceAccountToken"].as<bool>(true)) << where;
        for (const char* host : {"hostNetwork", "hostPID", "hostIPC"}) {
          EXPECT_FALSE(spec[host].as<bool>(false)) << where << " " << host;
        }
        for (const YAML::Node& volume : spec["volumes"]) {
          EXPECT_FALSE(volume["hostPath"]) << where << ": a hostPath volume";
        }
        for (const char* list : {"containers", "initContainers"}) {
          for (const YAML::Node& c : spec[list]) {
            const std::string name = where + "/" + c["name"].as<std::string>("?");
            const YAML::Node cs = c["securityContext"];
            ASSERT_TRUE(cs && cs.IsMap()) << name;
            EXPECT_FALSE(cs["allowPrivilegeEscalation"].as<bool>(true)) << name;
            EXPECT_FALSE(cs["privileged"].as<bool>(false)) << name;
            EXPECT_TRUE(cs["readOnlyRootFilesystem"].as<bool>(false)) << name;
            std::vector<std::string> dropped;
            for (const YAML::Node& d : cs["capabilities"]["drop"]) {
              dropped.push_back(d.as<std::string>());
            }
            EXPECT_EQ(dropped, std::vector<std::string>{"ALL"}) << name;
            EXPECT_FALSE(cs["capabilities"]["add"]) << name;
            EXPECT_TRUE(c["resources"]["limits"]["cpu"]) << name;
            EXPECT_TRUE(c["resources"]["limits"]["memory"]) << name;
            for (const YAML::Node& port : c["ports"]) EXPECT_FALSE(port["hostPort"]) << name;
          }
        }
      }
    }
    EXPECT_GE(pods, 3) << "the workers (and servers), the evaluator and the orchestrator";
  }
}

// Compose services are hardened the same way: read-only root, no capabilities, no privilege
// gain, bounded processes and memory. Seen to fail with read_only left out.
TEST(RenderCompose, EveryServiceIsHardened) {
  for (const char* job : {"configs/quickstart.yaml", "tests/data/render/ps-stragglers.yaml"}) {
    SCOPED_TRACE(job);
    const RenderedFiles files = RenderCompose(LoadCase(job), {});
    const YAML::Node doc = YAML::Load(files.at("docker-compose.yml"));
    int services = 0;
    for (const auto& entry : doc["services"]) {
      ++services;
      const std::string name = entry.first.as<std::string>();
      const YAML::Node s = entry.second;
      EXPECT_TRUE(s["read_only"].as<bool>(false)) << name;
      EXPECT_EQ(s["cap_drop"][0].as<std::string>(""), "ALL") << name;
      EXPECT_EQ(s["security_opt"][0].as<std::string>(""), "no-new-privileges:true") << name;
      EXPECT_GT(s["pids_limit"].as<int>(0), 0) << name;
      EXPECT_FALSE(s["mem_limit"].as<std::string>("").empty()) << name;
      EXPECT_FALSE(s["privileged"].as<bool>(false)) << name;
      EXPECT_FALSE(s["network_mode"]) << name;
    }
    EXPECT_GE(services, 4);
  }
}

struct GoldenCase {
  std::string job;      // relative to the source tree
  std::string compose;  // golden directories, relative to the source tree
  std::string kubernetes;
};

// Compares `files` with the directory `golden`, or rewrites it under STRATA_UPDATE_GOLDENS=1.
void ExpectGolden(const RenderedFiles& files, const std::string& golden) {
  const fs::path dir = Source(golden);
  const char* update = std::getenv("STRATA_UPDATE_GOLDENS");
  if (update != nullptr && std::string(update) == "1") {
    for (const auto& [path, text] : files) {
      fs::create_directories((dir / path).parent_path());
      std::ofstream(dir / path) << text;
    }
  }
  std::set<std::string> on_disk;
  if (fs::is_directory(dir)) {
    for (const auto& entry : fs::recursive_directory_iterator(dir)) {
      const std::string rel = fs::relative(entry.path(), dir).string();
      // The token a user created to apply the files is theirs, not a golden.
      if (entry.is_regular_file() && entry.path().filename() != "run-token") on_disk.insert(rel);
    }
  }
  std::set<std::string> rendered;
  for (const auto& [path, text] : files) {
    rendered.insert(path);
    EXPECT_EQ(Slurp(dir / path), text)
        << golden << "/" << path << " differs from what `strata render` writes now; if the "
        << "change is intended, regenerate the goldens (docs/deploy.md, \"Goldens\")";
  }
  EXPECT_EQ(on_disk, rendered) << golden << " holds other files than the renderer writes";
}

class RenderGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(RenderGolden, ComposeMatches) {
  ExpectGolden(RenderCompose(LoadCase(GetParam().job), {}), GetParam().compose);
}

TEST_P(RenderGolden, KubernetesMatches) {
  auto files = RenderKubernetes(LoadCase(GetParam().job), {});
  ASSERT_TRUE(files.ok()) << files.status();
  ExpectGolden(*files, GetParam().kubernetes);
}

// deploy/ is the quickstart job rendered: kept in sync here, so that it never drifts.
INSTANTIATE_TEST_SUITE_P(Cases, RenderGolden,
                         ::testing::Values(GoldenCase{"configs/quickstart.yaml", "deploy/compose",
                                                      "deploy/kubernetes"},
                                           GoldenCase{"tests/data/render/ps-stragglers.yaml",
                                                      "tests/data/render/ps-stragglers/compose",
                                                      "tests/data/render/ps-stragglers/kubernetes"},
                                           GoldenCase{"tests/data/render/allreduce.yaml",
                                                      "tests/data/render/allreduce/compose",
                                                      "tests/data/render/allreduce/kubernetes"}),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) {
                           return std::string(info.index == 0   ? "Quickstart"
                                              : info.index == 1 ? "PsStragglers"
                                                                : "Allreduce");
                         });

}  // namespace
}  // namespace strata
