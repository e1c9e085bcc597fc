// The pure parts of `strata submit` (docs/deploy.md, "strata submit"): the objects it creates
// and their owner references, and what it makes of kubectl's answers about the Job and its pods
// (states, failures, a pod that never starts). tests/integration/render/submit_test.cc runs the
// command itself against a fake kubectl.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <absl/strings/escaping.h>
#include <absl/strings/str_cat.h>
#include <nlohmann/json.hpp>

#include "orchestrator/launch/kubernetes_render.h"
#include "orchestrator/launch/kubernetes_state.h"
#include "orchestrator/launch/yaml_text.h"
#include "orchestrator/lib/kubernetes_submission.h"
#include "services/common/config/job_spec.h"

namespace strata {
namespace {

using nlohmann::json;
using yaml::Node;

v1::ResolvedJob LoadCase(const std::string& relative) {
  auto job = LoadJobSpec(std::string(STRATA_TEST_SOURCE_DIR) + "/" + relative);
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *job : v1::ResolvedJob();
}

std::string Scalar(const Node& object, const std::vector<std::string>& path) {
  const Node* n = &object;
  for (const std::string& key : path) {
    n = n->Find(key);
    if (n == nullptr) return "(missing)";
  }
  return n->scalar();
}

std::string Kind(const Node& object) { return Scalar(object, {"kind"}); }
std::string Name(const Node& object) { return Scalar(object, {"metadata", "name"}); }

TEST(YamlText, FindLooksUpMapKeysOnly) {
  Node m = Node::Map();
  m.Add("a", Node::Int(1)).Add("b", Node::Map().Add("c", Node::Str("x")));
  ASSERT_NE(m.Find("b"), nullptr);
  EXPECT_EQ(m.Find("b")->Find("c")->scalar(), "x");
  EXPECT_EQ(m.Find("missing"), nullptr);
  EXPECT_EQ(m.Find("a")->Find("anything"), nullptr);
  EXPECT_EQ(Node::Seq().Push(Node::Str("a")).Find("a"), nullptr);
}

TEST(KubernetesSubmission, TheJobIsSuspendedAndEverythingElseButTheClaimIsMarkedOwned) {
  const v1::ResolvedJob spec = LoadCase("tests/data/render/ps-stragglers.yaml");
  auto s = RenderKubernetesSubmission(spec, {}, "", "f00d");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->job_name, s->instance + "-orchestrator");
  EXPECT_EQ(Kind(s->job), "Job");
  EXPECT_EQ(Scalar(s->job, {"spec", "suspend"}), "true");
  EXPECT_EQ(s->job.Find("metadata")->Find("annotations"), nullptr);
  EXPECT_EQ(Kind(s->run_volume), "PersistentVolumeClaim");
  EXPECT_EQ(s->run_volume.Find("metadata")->Find("annotations"), nullptr);
  std::vector<std::string> kinds;
  for (const Node& o : s->owned) {
    kinds.push_back(Kind(o) + "/" + Name(o));
    EXPECT_EQ(Scalar(o, {"metadata", "annotations", kOwnerAnnotation}), s->job_name) << Name(o);
    EXPECT_EQ(Scalar(o, {"metadata", "labels", "app.kubernetes.io/instance"}), s->instance);
  }
  const std::string p = s->instance;
  EXPECT_EQ(kinds,
            (std::vector<std::string>{
                "ConfigMap/" + p + "-job-spec", "ConfigMap/" + p + "-topology",
                "Secret/" + p + "-run-token", "NetworkPolicy/" + p + "-intra-job",
                "Service/" + p + "-ps", "Job/" + p + "-ps", "Service/" + p + "-workers",
                "Job/" + p + "-worker", "Service/" + p + "-evaluator", "Pod/" + p + "-evaluator"}));
  // The Secret holds the token itself, as kustomize's secretGenerator would.
  EXPECT_EQ(Scalar(s->owned[2], {"data", "token"}), absl::Base64Escape("f00d"));
}

TEST(KubernetesSubmission, AnOverlaySetsTheReplicaCountsEverywhere) {
  const v1::ResolvedJob spec =
      LoadCase("tests/data/render/ps-stragglers.yaml");  // 3 workers, 2 servers
  auto small = RenderKubernetesSubmission(spec, {}, "small", "t");
  auto large = RenderKubernetesSubmission(spec, {}, "large", "t");
  ASSERT_TRUE(small.ok() && large.ok());
  EXPECT_EQ(Scalar(small->owned[1], {"data", "STRATA_WORKERS"}), "\"1\"");
  EXPECT_EQ(Scalar(small->owned[1], {"data", "STRATA_PARAMETER_SERVERS"}), "\"1\"");
  EXPECT_EQ(Scalar(small->owned[5], {"spec", "completions"}), "1");
  EXPECT_EQ(Scalar(small->owned[5], {"spec", "parallelism"}), "1");
  EXPECT_EQ(Scalar(large->owned[5], {"spec", "completions"}), "4");
  EXPECT_EQ(Scalar(small->owned[7], {"spec", "completions"}), "1");
  EXPECT_EQ(Scalar(large->owned[1], {"data", "STRATA_WORKERS"}), "\"6\"");
  EXPECT_EQ(Scalar(large->owned[7], {"spec", "parallelism"}), "6");
  auto bad = RenderKubernetesSubmission(spec, {}, "huge", "t");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown overlay 'huge'"), std::string::npos);
}

TEST(KubernetesSubmission, OwnerReferencesGoToTheMarkedObjectsOnly) {
  auto s = RenderKubernetesSubmission(LoadCase("configs/quickstart.yaml"), {}, "", "t");
  ASSERT_TRUE(s.ok());
  std::vector<Node> objects = s->owned;
  Node foreign = Node::Map();
  foreign.Add("kind", Node::Str("Service"))
      .Add("metadata",
           Node::Map()
               .Add("name", Node::Str("x"))
               .Add("annotations", Node::Map().Add(kOwnerAnnotation, Node::Str("other"))));
  objects.push_back(foreign);
  objects.push_back(s->run_volume);
  EXPECT_EQ(AddOwnerReferences({s->job_name, "0a1b-uid"}, &objects),
            static_cast<int>(s->owned.size()));
  for (size_t i = 0; i < objects.size(); ++i) {
    const Node* refs = objects[i].Find("metadata")->Find("ownerReferences");
    if (i >= s->owned.size()) {
      EXPECT_EQ(refs, nullptr) << Name(objects[i]);
      continue;
    }
    ASSERT_NE(refs, nullptr) << Name(objects[i]);
    ASSERT_EQ(refs->entries().size(), 1u);
    const Node& ref = refs->entries()[0].value;
    EXPECT_EQ(Scalar(ref, {"apiVersion"}), "batch/v1");
    EXPECT_EQ(Scalar(ref, {"kind"}), "Job");
    EXPECT_EQ(Scalar(ref, {"name"}), s->job_name);
    EXPECT_EQ(Scalar(ref, {"uid"}),
              yaml::QuoteScalar("0a1b-uid"));  // quoted: it starts with a digit
    EXPECT_EQ(Scalar(ref, {"controller"}), "false");
    EXPECT_EQ(Scalar(ref, {"blockOwnerDeletion"}), "true");
  }
  EXPECT_NE(yaml::Emit(objects[0]).find("    - apiVersion: batch/v1\n      kind: Job\n"),
            std::string::npos)
      << yaml::Emit(objects[0]);
}

json Job(const json& conditions, const json& extra_status = json::object()) {
  json status = extra_status;
  status["conditions"] = conditions;
  return {{"apiVersion", "batch/v1"},
          {"kind", "Job"},
          {"metadata", {{"name", "q-orchestrator"}, {"uid", "u-1"}}},
          {"spec", {{"suspend", false}}},
          {"status", status}};
}

TEST(KubernetesState, JobStatesFromTheirConditions) {
  auto running = ParseJob(Job(json::array(), {{"active", 1}}).dump());
  ASSERT_TRUE(running.ok()) << running.status();
  EXPECT_EQ(running->phase, JobPhase::kRunning);
  EXPECT_EQ(running->uid, "u-1");
  EXPECT_EQ(running->active, 1);
  EXPECT_EQ(DescribeJob(*running), "running");

  auto done = ParseJob(Job({{{"type", "Complete"}, {"status", "True"}}}).dump());
  EXPECT_EQ(done->phase, JobPhase::kSucceeded);

  auto failed = ParseJob(Job({{{"type", "Failed"},
                               {"status", "True"},
                               {"reason", "BackoffLimitExceeded"},
                               {"message", "Job has reached the specified backoff limit"}}})
                             .dump());
  EXPECT_EQ(failed->phase, JobPhase::kFailed);
  EXPECT_EQ(DescribeJob(*failed),
            "failed (BackoffLimitExceeded: Job has reached the specified backoff limit)");

  // 1.31+: FailureTarget first; a False condition counts for nothing.
  auto target =
      ParseJob(Job({{{"type", "Complete"}, {"status", "False"}},
                    {{"type", "FailureTarget"}, {"status", "True"}, {"reason", "PodFailed"}}})
                   .dump());
  EXPECT_EQ(target->phase, JobPhase::kFailed);
  EXPECT_EQ(target->reason, "PodFailed");

  json suspended = Job(json::array());
  suspended["spec"]["suspend"] = true;
  EXPECT_EQ(ParseJob(suspended.dump())->phase, JobPhase::kSuspended);

  EXPECT_FALSE(ParseJob("error: not json").ok());
  EXPECT_FALSE(ParseJob(R"({"kind": "Pod"})").ok());
}

json Container(const std::string& name, const json& state, bool ready = false) {
  return {{"name", name}, {"ready", ready}, {"restartCount", 0}, {"state", state}};
}

json Pod(const std::string& name, const std::string& component, const std::string& phase,
         const json& containers, bool ready = false, const json& extra = json::object()) {
  json pod = {
      {"metadata",
       {{"name", name},
        {"labels",
         {{"app.kubernetes.io/instance", "q"}, {"app.kubernetes.io/component", component}}}}},
      {"status",
       {{"phase", phase},
        {"conditions", {{{"type", "Ready"}, {"status", ready ? "True" : "False"}}}},
        {"containerStatuses", containers}}}};
  pod.merge_patch(extra);
  return pod;
}

json Pods(const json& items) { return {{"apiVersion", "v1"}, {"kind", "List"}, {"items", items}}; }

const json kRunning = {{"running", {{"startedAt", "2026-01-01T00:00:00Z"}}}};

TEST(KubernetesState, PodsAreNamedAsTheServicesOfALocalRun) {
  json worker = Pod(
      "q-worker-xk2p9", "worker", "Running", json::array({Container("worker", kRunning, true)}),
      true, {{"metadata", {{"annotations", {{"batch.kubernetes.io/job-completion-index", "1"}}}}}});
  json ps_by_label =
      Pod("q-ps-3", "ps", "Running", json::array({Container("ps", kRunning, true)}), true,
          {{"metadata", {{"labels", {{"apps.kubernetes.io/pod-index", "0"}}}}}});
  json ps_by_name =
      Pod("q-ps-1", "ps", "Running", json::array({Container("ps", kRunning, true)}), true);
  // The servers are an Indexed Job now: pod <job>-ps-<index>-<random>, the index annotated.
  json ps_indexed =
      Pod("q-ps-2-h7x2k", "ps", "Running", json::array({Container("ps", kRunning, true)}), true,
          {{"metadata", {{"annotations", {{"batch.kubernetes.io/job-completion-index", "2"}}}}}});
  json orchestrator =
      Pod("q-orchestrator-abcde", "orchestrator", "Pending",
          json::array({Container("orchestrator", {{"waiting", {{"reason", "PodInitializing"}}}})}));
  orchestrator["status"]["initContainerStatuses"] = json::array(
      {Container("sharder", {{"terminated", {{"exitCode", 0}, {"reason", "Completed"}}}})});
  json foreign = Pod("other", "", "Running", json::array(), true);
  auto pods = ParsePods(Pods({worker, ps_by_label, ps_by_name, ps_indexed, orchestrator, foreign,
                              Pod("q-evaluator", "evaluator", "Running", json::array(), true)})
                            .dump());
  ASSERT_TRUE(pods.ok()) << pods.status();
  std::vector<std::string> services;
  for (const PodState& p : *pods) services.push_back(p.service);
  EXPECT_EQ(services, (std::vector<std::string>{"evaluator", "orchestrator", "other", "ps-0",
                                                "ps-1", "ps-2", "worker-1"}));
  const PodState& o = (*pods)[1];
  ASSERT_EQ(o.containers.size(), 2u);
  EXPECT_TRUE(o.containers[0].init);
  EXPECT_EQ(o.containers[0].name, "sharder");
  EXPECT_EQ(o.containers[1].reason, "PodInitializing");
  EXPECT_FALSE(ParsePods(R"({"kind": "List"})").ok());
}

PodState Waiting(const std::string& reason, const std::string& message = "") {
  PodState p;
  p.name = "q-worker-0-x";
  p.service = "worker-0";
  p.phase = "Pending";
  p.containers.push_back({"worker", false, false, "waiting", reason, message, 0, 0});
  return p;
}

TEST(KubernetesState, APodThatCannotStartWithoutHelpIsRecognised) {
  EXPECT_EQ(StartBlocker(Waiting("ImagePullBackOff", "Back-off pulling image \"strata:gone\"")),
            "container worker: ImagePullBackOff: Back-off pulling image \"strata:gone\"");
  EXPECT_TRUE(StartBlocker(Waiting("ErrImagePull")));
  EXPECT_TRUE(
      StartBlocker(Waiting("CreateContainerConfigError", "secret \"q-run-token\" not found")));
  EXPECT_FALSE(StartBlocker(Waiting("ContainerCreating")));
  EXPECT_FALSE(StartBlocker(Waiting("PodInitializing")));
  PodState unschedulable = Waiting("");
  unschedulable.containers.clear();
  unschedulable.unschedulable = "0/3 nodes are available: 3 Insufficient cpu.";
  EXPECT_EQ(StartBlocker(unschedulable),
            "Unschedulable: 0/3 nodes are available: 3 Insufficient cpu.");
  PodState leaving = Waiting("ImagePullBackOff");
  leaving.deleting = true;
  EXPECT_FALSE(StartBlocker(leaving));
  PodState crashing = Waiting("CrashLoopBackOff");  // it started: the Job's own failure reports it
  crashing.phase = "Running";
  EXPECT_FALSE(StartBlocker(crashing));
}

TEST(KubernetesState, APodMustStayBlockedForTheWholeLimitBeforeItCounts) {
  using std::chrono::seconds;
  StartWatch watch(seconds(10));
  const StartWatch::Clock::time_point t0{};
  const std::vector<PodState> stuck = {Waiting("ImagePullBackOff")};
  const std::vector<PodState> pulling = {Waiting("ContainerCreating")};
  EXPECT_FALSE(watch.Update(stuck, t0));
  EXPECT_FALSE(watch.Update(stuck, t0 + seconds(9)));
  EXPECT_FALSE(watch.Update(pulling, t0 + seconds(10)));  // it moved on: the clock starts again
  EXPECT_FALSE(watch.Update(stuck, t0 + seconds(11)));
  EXPECT_FALSE(watch.Update(stuck, t0 + seconds(20)));
  EXPECT_EQ(watch.Update(stuck, t0 + seconds(21)),
            "worker-0 (pod q-worker-0-x) never started: container worker: ImagePullBackOff");
  StartWatch at_once(seconds(0));
  EXPECT_TRUE(at_once.Update(stuck, t0));
}

TEST(KubernetesState, FailuresNameThePodTheContainerAndTheExit) {
  auto pods = ParsePods(
      Pods({Pod("q-orchestrator-abcde", "orchestrator", "Failed",
                json::array({Container("orchestrator",
                                       {{"terminated", {{"exitCode", 1}, {"reason", "Error"}}}})})),
            Pod("q-worker-x", "worker", "Succeeded",
                json::array({Container(
                    "worker", {{"terminated", {{"exitCode", 0}, {"reason", "Completed"}}}})})),
            Pod("q-evaluator", "evaluator", "Failed", json::array()),
            Pod("q-ps-0", "ps", "Running",
                json::array({Container(
                    "ps", {{"terminated", {{"exitCode", 137}, {"reason", "OOMKilled"}}}})}))})
          .dump());
  ASSERT_TRUE(pods.ok());
  EXPECT_EQ(PodFailures(*pods),
            (std::vector<std::string>{
                "evaluator (pod q-evaluator): failed",
                "orchestrator (pod q-orchestrator-abcde): container orchestrator exited with code "
                "1 (Error)",
                "ps-0 (pod q-ps-0): container ps exited with code 137 (OOMKilled)"}));
}

TEST(KubernetesState, ProgressCountsReadyPodsAndNamesTheOthers) {
  JobState job;
  auto pods = ParsePods(
      Pods({Pod("q-orchestrator-a", "orchestrator", "Running",
                json::array({Container("orchestrator", kRunning, true)}), true),
            Pod("q-ps-0", "ps", "Running", json::array({Container("ps", kRunning)}), false),
            Pod("q-evaluator", "evaluator", "Pending",
                json::array(
                    {Container("evaluator", {{"waiting", {{"reason", "ContainerCreating"}}}})})),
            Pod("q-sharder-done", "worker", "Succeeded", json::array())})
          .dump());
  ASSERT_TRUE(pods.ok());
  EXPECT_EQ(Progress(job, *pods),
            "running; pods ready 1/3; evaluator Pending (ContainerCreating), ps-0 Running (not "
            "ready)");
}

TEST(KubernetesSubmissionFiles, LastLines) {
  EXPECT_EQ(LastLines("a\nb\nc\n", 2), "b\nc\n");
  EXPECT_EQ(LastLines("a\nb\nc", 2), "b\nc");
  EXPECT_EQ(LastLines("a\nb\n", 5), "a\nb\n");
  EXPECT_EQ(LastLines("a\nb\n", -1), "a\nb\n");
  EXPECT_EQ(LastLines("a\nb\n", 0), "");
  EXPECT_EQ(LastLines("", 3), "");
}

}  // namespace
}  // namespace strata
