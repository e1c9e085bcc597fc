// `strata submit`, `status`, `logs` and `delete` through the real binary, up to kubectl: a fake
// kubectl (a bash script this test writes) records every call, keeps a copy of every file it is
// given with -f, and answers from scenario files (the n-th `get job` gets job-<n>.json, or the
// last there is). Each test asserts the exact calls, the exit code and the message. The objects
// the fake received are also run through `kubectl kustomize` (the real one) for comparison and
// through the offline schema check when those are installed. No cluster, no sleeps, no ports.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_replace.h>
#include <absl/strings/str_split.h>
#include <nlohmann/json.hpp>

#include "tests/integration/orchestrator/cli_test_util.h"
#include "tests/integration/render/kustomize_build.h"
#include "tests/support/ci.h"

namespace strata::testing {
namespace {

using nlohmann::json;

std::string Source() { return STRATA_TEST_SOURCE_DIR; }
std::string Quickstart() { return Source() + "/configs/quickstart.yaml"; }

struct ScopedDir {
  explicit ScopedDir(const std::string& tag) : path(MakeTempDir(tag)) {}
  ~ScopedDir() { std::filesystem::remove_all(path); }
  const std::string path;
};

constexpr char kFakeKubectl[] = R"sh(#!/bin/bash
# A fake kubectl for tests/integration/render/submit_test.cc: records its arguments, keeps a copy
# of every file given with -f, and answers from the scenario files in $FAKE_KUBECTL_DIR.
set -u
d="$FAKE_KUBECTL_DIR"
printf '%s\n' "$*" >> "$d/calls"
call=$(wc -l < "$d/calls")
prev="" ns=default
for a in "$@"; do
  if [ "$prev" = "-f" ]; then cp "$a" "$d/applied-$call.yaml"; fi
  if [ "$prev" = "-n" ]; then ns="$a"; fi
  prev="$a"
done
if [ -f "$d/hang-on" ] && [[ "$*" == *"$(cat "$d/hang-on")"* ]]; then exec sleep 600; fi
if [ -f "$d/fail-on" ] && [[ "$*" == *"$(cat "$d/fail-on")"* ]]; then
  cat "$d/fail-message" >&2
  exit 1
fi
# The n-th answer of a kind, or the last one there is.
answer() {
  local n
  n=$(( $(cat "$d/count-$1" 2>/dev/null || echo 0) + 1 ))
  echo "$n" > "$d/count-$1"
  while [ "$n" -gt 1 ] && [ ! -f "$d/$1-$n.json" ]; do n=$((n - 1)); done
  cat "$d/$1-$n.json"
}
case "$1 ${2:-}" in
  "create -f")
    if [[ "$*" == *jsonpath* ]]; then printf '%s %s' "$(cat "$d/uid")" "$ns"; else echo created; fi ;;
  "apply -f") echo "persistentvolumeclaim/quickstart-run created" ;;
  "patch job") echo "job.batch/$3 patched" ;;
  "get job") answer job ;;
  "get pods") answer pods ;;
  "logs "*) echo "the log of $2" ;;
  "delete "*) echo deleted ;;
  *) echo "fake kubectl: unexpected call: $*" >&2; exit 3 ;;
esac
)sh";

constexpr char kUid[] = "4f1c1c1e-0000-4a5b-8c9d-0123456789ab";

// The fake kubectl, its scenario and what it recorded.
class FakeKubectl {
 public:
  FakeKubectl() : dir_("fake-kubectl") {
    std::filesystem::create_directories(dir_.path + "/bin");
    WriteText(kubectl(), kFakeKubectl);
    ::chmod(kubectl().c_str(), 0755);
    WriteText(dir_.path + "/uid", kUid);
  }
  std::string kubectl() const { return dir_.path + "/bin/kubectl"; }
  const std::string& dir() const { return dir_.path; }
  // The answers to `get job` (or `get pods`), in order; the last one repeats.
  void Answer(const std::string& kind, const std::vector<json>& answers) {
    for (size_t i = 0; i < answers.size(); ++i) {
      WriteText(absl::StrCat(dir_.path, "/", kind, "-", i + 1, ".json"),
                answers[i].is_null() ? "" : answers[i].dump());
    }
  }
  void FailOn(const std::string& words, const std::string& stderr_text) {
    WriteText(dir_.path + "/fail-on", words);
    WriteText(dir_.path + "/fail-message", stderr_text);
  }
  void HangOn(const std::string& words) { WriteText(dir_.path + "/hang-on", words); }
  std::vector<std::string> Calls() const {
    return absl::StrSplit(Slurp(dir_.path + "/calls"), '\n', absl::SkipEmpty());
  }
  std::string Applied(int call) const {
    return Slurp(absl::StrCat(dir_.path, "/applied-", call, ".yaml"));
  }
  // The environment and command line of `strata` with this kubectl first on PATH.
  std::string Strata(const std::string& args) const {
    return absl::StrCat("FAKE_KUBECTL_DIR=", dir_.path, " PATH=", dir_.path, "/bin:$PATH ",
                        testing::Strata(), " ", args);
  }

 private:
  ScopedDir dir_;
};

json Job(const json& conditions = json::array()) {
  return {{"apiVersion", "batch/v1"},
          {"kind", "Job"},
          {"metadata", {{"name", "quickstart-orchestrator"}, {"uid", kUid}}},
          {"spec", {{"suspend", false}}},
          {"status", {{"active", 1}, {"conditions", conditions}}}};
}

json Succeeded() { return Job(json::array({{{"type", "Complete"}, {"status", "True"}}})); }

json Failed() {
  return Job(json::array({{{"type", "Failed"},
                           {"status", "True"},
                           {"reason", "BackoffLimitExceeded"},
                           {"message", "Job has reached the specified backoff limit"}}}));
}

json Pod(const std::string& name, const std::string& component, const std::string& phase,
         bool ready, const json& state, const json& annotations = json::object()) {
  return {
      {"metadata",
       {{"name", name},
        {"labels",
         {{"app.kubernetes.io/instance", "quickstart"},
          {"app.kubernetes.io/component", component}}},
        {"annotations", annotations}}},
      {"status",
       {{"phase", phase},
        {"conditions", json::array({{{"type", "Ready"}, {"status", ready ? "True" : "False"}}})},
        {"containerStatuses",
         json::array(
             {{{"name", component}, {"ready", ready}, {"restartCount", 0}, {"state", state}}})}}}};
}

const json kRunning = {{"running", json::object()}};

json Worker(int rank, const std::string& phase, bool ready, const json& state) {
  return Pod(absl::StrCat("quickstart-worker-", rank, "-x", rank), "worker", phase, ready, state,
             {{"batch.kubernetes.io/job-completion-index", std::to_string(rank)}});
}

// The quickstart's five pods, all up, or with `replace` in place of one of them.
json Pods(std::vector<json> replace = {}) {
  std::vector<json> pods = {
      Pod("quickstart-orchestrator-abcde", "orchestrator", "Running", true, kRunning),
      Pod("quickstart-ps-0", "ps", "Running", true, kRunning), Worker(0, "Running", true, kRunning),
      Worker(1, "Running", true, kRunning),
      Pod("quickstart-evaluator", "evaluator", "Running", true, kRunning)};
  for (const json& r : replace) {
    for (json& p : pods) {
      if (p["metadata"]["name"] == r["metadata"]["name"]) p = r;
    }
  }
  return {{"apiVersion", "v1"}, {"kind", "List"}, {"items", pods}};
}

// The calls `strata submit` makes to create the run, in order.
std::vector<std::string> CreateCalls(const std::string& out, const std::string& ns = "default") {
  return {
      "create -f " + out +
          "/submitted/orchestrator-job.yaml -o jsonpath={.metadata.uid} "
          "{.metadata.namespace}" +
          (ns == "default" ? "" : " -n " + ns),
      "apply -f " + out + "/submitted/run-volume.yaml -n " + ns,
      "create -f " + out + "/submitted/owned.yaml -n " + ns,
      "patch job quickstart-orchestrator --type=merge -p {\"spec\":{\"suspend\":false}} -n " + ns};
}

const std::string kGetJob = "get job quickstart-orchestrator -o json --ignore-not-found -n default";
const std::string kGetPods = "get pods -l app.kubernetes.io/instance=quickstart -o json -n default";
const std::string kDeleteJob =
    "delete job quickstart-orchestrator --cascade=foreground --ignore-not-found --wait=true "
    "--timeout=300s -n default";

std::vector<std::string> LogCalls() {
  return {"logs quickstart-evaluator --all-containers=true -n default",
          "logs quickstart-orchestrator-abcde --all-containers=true -n default",
          "logs quickstart-ps-0 --all-containers=true -n default",
          "logs quickstart-worker-0-x0 --all-containers=true -n default",
          "logs quickstart-worker-1-x1 --all-containers=true -n default"};
}

std::vector<std::string> Concat(std::vector<std::vector<std::string>> parts) {
  std::vector<std::string> all;
  for (auto& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

void ExpectHas(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "no '" << part << "' in:\n" << text;
}

// Every document of `text` that is not empty.
std::vector<YAML::Node> Documents(const std::string& text) {
  std::vector<YAML::Node> docs;
  for (const YAML::Node& d : YAML::LoadAll(text)) {
    if (d.IsMap()) docs.push_back(d);
  }
  return docs;
}

TEST(Submit, CreatesTheJobFirstThenItsOwnedObjectsFollowsItAndCleansUpOnSuccess) {
  FakeKubectl fake;
  const ScopedDir out("submit-ok");
  const std::string sub = out.path + "/sub";
  fake.Answer("job", {Job(), Job(), Succeeded()});
  json starting =
      Pods({Worker(1, "Pending", false, {{"waiting", {{"reason", "ContainerCreating"}}}})});
  fake.Answer("pods", {starting, Pods()});
  const CommandResult r =
      RunCommand(fake.Strata("submit " + Quickstart() + " --out " + sub + " --poll-interval 0.01"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(fake.Calls(), Concat({CreateCalls(sub),
                                  {kGetJob, kGetPods, kGetJob, kGetPods, kGetJob, kGetPods},
                                  LogCalls(),
                                  {kDeleteJob}}));
  ExpectHas(r.output, "created job quickstart-orchestrator in namespace default (uid " +
                          std::string(kUid) + ")");
  ExpectHas(r.output, "running; pods ready 4/5; worker-1 Pending (ContainerCreating)");
  ExpectHas(r.output, "running; pods ready 5/5");
  ExpectHas(r.output, "done: job quickstart-orchestrator succeeded");
  ExpectHas(r.output, "deleted; claim quickstart-run keeps the run record");

  // The Job, created first, is suspended and owned by nothing; the claim is not owned; every
  // other object carries the UID the fake returned.
  const std::vector<YAML::Node> job = Documents(fake.Applied(1));
  ASSERT_EQ(job.size(), 1u);
  EXPECT_EQ(job[0]["kind"].as<std::string>(), "Job");
  EXPECT_TRUE(job[0]["spec"]["suspend"].as<bool>());
  EXPECT_FALSE(job[0]["metadata"]["ownerReferences"]);
  const std::vector<YAML::Node> claim = Documents(fake.Applied(2));
  ASSERT_EQ(claim.size(), 1u);
  EXPECT_EQ(claim[0]["kind"].as<std::string>(), "PersistentVolumeClaim");
  EXPECT_FALSE(claim[0]["metadata"]["ownerReferences"]);
  const std::vector<YAML::Node> owned = Documents(fake.Applied(3));
  std::vector<std::string> kinds;
  for (const YAML::Node& o : owned) {
    kinds.push_back(o["kind"].as<std::string>());
    const YAML::Node refs = o["metadata"]["ownerReferences"];
    ASSERT_TRUE(refs && refs.size() == 1) << o["metadata"]["name"];
    EXPECT_EQ(refs[0]["uid"].as<std::string>(), kUid);
    EXPECT_EQ(refs[0]["name"].as<std::string>(), "quickstart-orchestrator");
    EXPECT_EQ(refs[0]["kind"].as<std::string>(), "Job");
    EXPECT_TRUE(refs[0]["blockOwnerDeletion"].as<bool>());
  }
  EXPECT_EQ(absl::StrJoin(kinds, " "),
            "ConfigMap ConfigMap Secret NetworkPolicy Service Job Service Job Service Pod");

  // The record, the token (private) and the logs saved before the pods went.
  const json record = ReadJson(sub + "/submission.json");
  EXPECT_EQ(record.value("uid", ""), kUid);
  EXPECT_EQ(record.value("namespace", ""), "default");
  EXPECT_EQ(record.value("job", ""), "quickstart-orchestrator");
  EXPECT_EQ(record.value("kubectl", ""), fake.kubectl());
  struct stat st;
  ASSERT_EQ(::stat((sub + "/base/run-token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(Slurp(sub + "/base/run-token").size(), 64u);
  ASSERT_EQ(::stat((sub + "/submitted/owned.yaml").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(Slurp(sub + "/logs/worker-1.log"), "the log of quickstart-worker-1-x1\n");
  EXPECT_EQ(Slurp(sub + "/logs/orchestrator.log"), "the log of quickstart-orchestrator-abcde\n");
}

TEST(Submit, AFailedJobIsReportedWithItsPodAndDeleted) {
  FakeKubectl fake;
  const ScopedDir out("submit-failed");
  fake.Answer("job", {Job(), Failed()});
  json crashed = Pod("quickstart-orchestrator-abcde", "orchestrator", "Failed", false,
                     {{"terminated", {{"exitCode", 1}, {"reason", "Error"}}}});
  fake.Answer("pods", {Pods(), Pods({crashed})});
  const CommandResult r = RunCommand(
      fake.Strata("submit " + Quickstart() + " --out " + out.path + "/sub --poll-interval 0.01"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(fake.Calls(), Concat({CreateCalls(out.path + "/sub"),
                                  {kGetJob, kGetPods, kGetJob, kGetPods},
                                  LogCalls(),
                                  {kDeleteJob}}));
  ExpectHas(r.output,
            "job quickstart-orchestrator failed (BackoffLimitExceeded: Job has reached the "
            "specified backoff limit)\n  orchestrator (pod quickstart-orchestrator-abcde): "
            "container orchestrator exited with code 1 (Error)");
  ExpectHas(r.output, "the orchestrator's log ends:\nthe log of quickstart-orchestrator-abcde");
}

TEST(Submit, APodThatNeverStartsFailsTheRunNamingThePodAndTheReason) {
  FakeKubectl fake;
  const ScopedDir out("submit-pull");
  fake.Answer("job", {Job()});
  fake.Answer("pods",
              {Pods({Worker(0, "Pending", false,
                            {{"waiting",
                              {{"reason", "ImagePullBackOff"},
                               {"message", "Back-off pulling image \"strata:missing\""}}}})})});
  // --start-timeout 0: the first look that sees the pod stuck decides, no clock involved.
  const CommandResult r =
      RunCommand(fake.Strata("submit " + Quickstart() + " --out " + out.path +
                             "/sub --image strata:missing --start-timeout 0 --poll-interval 0.01"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(
      fake.Calls(),
      Concat({CreateCalls(out.path + "/sub"), {kGetJob, kGetPods}, LogCalls(), {kDeleteJob}}));
  ExpectHas(r.output,
            "worker-0 (pod quickstart-worker-0-x0) never started: container worker: "
            "ImagePullBackOff: Back-off pulling image \"strata:missing\"");
  ExpectHas(Slurp(out.path + "/sub/submitted/owned.yaml"), "image: strata:missing");
}

TEST(Submit, AFailingCreateRollsBackTheJobAndTheNewClaim) {
  FakeKubectl fake;
  const ScopedDir out("submit-apply");
  const std::string sub = out.path + "/sub";
  fake.FailOn("owned.yaml",
              "Error from server (Forbidden): networkpolicies.networking.k8s.io is forbidden: "
              "User \"me\" cannot create resource \"networkpolicies\"");
  const CommandResult r =
      RunCommand(fake.Strata("submit " + Quickstart() + " --out " + sub + " --poll-interval 0.01"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  std::vector<std::string> create = CreateCalls(sub);
  create.pop_back();  // no resume
  EXPECT_EQ(fake.Calls(),
            Concat({create,
                    {kDeleteJob,
                     "delete pvc quickstart-run --ignore-not-found --wait=false -n default"}}));
  ExpectHas(r.output, "`kubectl create -f " + sub +
                          "/submitted/owned.yaml -n default` exited with code 1: Error from "
                          "server (Forbidden): networkpolicies.networking.k8s.io is forbidden");
  ExpectHas(r.output, "deleting job quickstart-orchestrator and what it owns");
}

TEST(Submit, AJobThatCannotBeCreatedLeavesNothingAndDeletesNothing) {
  FakeKubectl fake;
  const ScopedDir out("submit-exists");
  fake.FailOn("orchestrator-job.yaml",
              "Error from server (AlreadyExists): jobs.batch \"quickstart-orchestrator\" already "
              "exists");
  const CommandResult r = RunCommand(
      fake.Strata("submit " + Quickstart() + " --out " + out.path + "/sub --namespace team-a"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  // Not ours to delete: only the one call.
  EXPECT_EQ(fake.Calls(), std::vector<std::string>{CreateCalls(out.path + "/sub", "team-a")[0]});
  ExpectHas(r.output, "could not create job quickstart-orchestrator: `kubectl create -f");
  ExpectHas(r.output, "already exists");
  EXPECT_FALSE(Exists(out.path + "/sub/submission.json"));
}

TEST(Submit, AKubectlThatHangsIsKilledAtItsDeadlineAndTheRunRolledBack) {
  FakeKubectl fake;
  const ScopedDir out("submit-hang");
  fake.HangOn("patch job");
  const CommandResult r = RunCommand(
      fake.Strata("submit " + Quickstart() + " --out " + out.path + "/sub --kubectl-timeout 1"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  ExpectHas(r.output,
            "patch job quickstart-orchestrator --type=merge -p '{\"spec\":{\"suspend\":"
            "false}}' -n default` did not finish within 1 s and was killed");
  const std::vector<std::string> calls = fake.Calls();
  ASSERT_GE(calls.size(), 5u);
  EXPECT_EQ(calls[4], kDeleteJob);
}

TEST(Submit, DetachedThenStatusLogsAndDeleteWorkOnTheSubmissionDirectory) {
  FakeKubectl fake;
  const ScopedDir out("submit-detach");
  const std::string sub = out.path + "/sub";
  fake.Answer("job", {Job()});
  fake.Answer(
      "pods",
      {Pods({Worker(1, "Pending", false,
                    {{"waiting", {{"reason", "ErrImagePull"}, {"message", "not found"}}}})})});
  CommandResult r =
      RunCommand(fake.Strata("submit " + Quickstart() + " --out " + sub + " --detach"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(fake.Calls(), CreateCalls(sub));
  ExpectHas(r.output, "detached: job quickstart-orchestrator runs on");

  // The parent directory works too (runs/<job>-<timestamp>/ holds kubernetes/ by default).
  std::filesystem::rename(sub, out.path + "/kubernetes");
  const std::string run = out.path;
  r = RunCommand(fake.Strata("status " + run));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  ExpectHas(r.output, "kubernetes: job/quickstart-orchestrator in namespace default, uid " +
                          std::string(kUid));
  ExpectHas(r.output, "state:      running; pods ready 4/5; worker-1 Pending (ErrImagePull)");
  ExpectHas(r.output, "worker-1       quickstart-worker-1-x1");
  ExpectHas(r.output, "Pending (container worker: ErrImagePull: not found)");

  r = RunCommand(fake.Strata("logs " + run + " --service worker-1 --tail 20"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "the log of quickstart-worker-1-x1\n");
  // --follow hands the terminal to `kubectl logs --follow` of the pod (the fake prints and ends).
  r = RunCommand(fake.Strata("logs " + run + " worker-1 --follow"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "the log of quickstart-worker-1-x1\n");
  ASSERT_FALSE(fake.Calls().empty());
  EXPECT_EQ(fake.Calls().back(),
            "logs quickstart-worker-1-x1 --all-containers=true --follow=true -n default");
  r = RunCommand(fake.Strata("logs " + run + " --service ps-7"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  ExpectHas(r.output,
            "no pod of the run is service 'ps-7' (the run's: evaluator, orchestrator, "
            "ps-0, worker-0, worker-1)");

  const size_t before = fake.Calls().size();
  r = RunCommand(fake.Strata("delete " + run));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> calls = fake.Calls();
  EXPECT_EQ(std::vector<std::string>(calls.begin() + static_cast<long>(before), calls.end()),
            (std::vector<std::string>{
                kGetJob, kDeleteJob,
                "delete statefulset,job,pod,service,networkpolicy,configmap,secret -l "
                "app.kubernetes.io/instance=quickstart --ignore-not-found --wait=true "
                "--timeout=300s -n default"}));
  ExpectHas(r.output, "claim quickstart-run keeps the run record");
}

TEST(Submit, StatusAndDeleteLeaveAnotherSubmissionOfTheSameJobAlone) {
  FakeKubectl fake;
  const ScopedDir out("submit-other");
  fake.Answer("job", {Job()});
  ASSERT_EQ(RunCommand(fake.Strata("submit " + Quickstart() + " --out " + out.path + " --detach"))
                .exit_code,
            0);
  json other = Job();
  other["metadata"]["uid"] = "another-uid";
  std::filesystem::remove(fake.dir() + "/count-job");
  fake.Answer("job", {other});
  CommandResult r = RunCommand(fake.Strata("status " + out.path));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  ExpectHas(r.output,
            "state:      gone (job quickstart-orchestrator in namespace default is "
            "another submission (uid another-uid");
  const size_t before = fake.Calls().size();
  r = RunCommand(fake.Strata("delete " + out.path));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  ExpectHas(r.output, "nothing deleted");
  EXPECT_EQ(fake.Calls().size(), before + 1) << "only the look at the Job";
  // And once the Job is gone, status says so.
  fake.Answer("job", {nullptr});
  r = RunCommand(fake.Strata("status " + out.path));
  ExpectHas(r.output, "state:      gone (no job quickstart-orchestrator in namespace default");
}

TEST(Submit, CtrlCDeletesTheRun) {
  FakeKubectl fake;
  const ScopedDir out("submit-int");
  fake.Answer("job", {Job()});
  fake.Answer("pods", {Pods()});
  ::setenv("FAKE_KUBECTL_DIR", fake.dir().c_str(), 1);
  BackgroundRun run({"submit", Quickstart(), "--out", out.path + "/sub", "--kubectl",
                     fake.kubectl(), "--poll-interval", "0.05"},
                    out.path + "/output");
  // Once it follows the Job (the fake has answered a look at the pods), interrupt it.
  ASSERT_TRUE(Eventually(
      [&] {
        const auto calls = fake.Calls();
        return std::count(calls.begin(), calls.end(), kGetPods) >= 1;
      },
      std::chrono::seconds(60)));
  ::kill(run.pid(), SIGINT);
  EXPECT_EQ(run.Wait(std::chrono::seconds(60)), 130) << run.Output();
  const std::vector<std::string> calls = fake.Calls();
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back(), kDeleteJob);
  ExpectHas(run.Output(), "interrupted");
}

TEST(Submit, TheRunIsDeletedWhenItsTimeRunsOut) {
  FakeKubectl fake;
  const ScopedDir out("submit-timeout");
  fake.Answer("job", {Job()});
  fake.Answer("pods", {Pods()});
  const CommandResult r = RunCommand(fake.Strata("submit " + Quickstart() + " --out " + out.path +
                                                 "/sub --timeout 0.001 --poll-interval 0.01"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  ExpectHas(r.output, "job quickstart-orchestrator still runs after 0.001 s (--timeout)");
  EXPECT_EQ(fake.Calls().back(), kDeleteJob);
}

TEST(Submit, BadInputOrNoKubectlExitsTwoAndTouchesNothing) {
  FakeKubectl fake;
  const ScopedDir out("submit-bad");
  const ScopedDir empty("submit-empty-path");
  const std::string sub = out.path + "/sub";
  struct Case {
    std::string command, message;
  };
  for (const Case& c : std::vector<Case>{
           {fake.Strata("submit " + Quickstart() + " --out " + sub + " --overlay huge"),
            "unknown overlay 'huge': use small or large"},
           {fake.Strata("submit " + Quickstart() + " --out " + sub + " --image ''"),
            "--image: the image name is empty"},
           {fake.Strata("submit " + out.path + "/missing.yaml --out " + sub), "missing.yaml"},
           {fake.Strata("submit " + Quickstart() + " --out " + sub + " --set cluster.workers=0"),
            "cluster.workers"},
           {fake.Strata("submit " + Quickstart() + " --out " + sub + " --poll-interval 0"),
            "must be positive"},
           {"PATH=" + empty.path + " " + Strata() + " submit " + Quickstart() + " --out " + sub,
            "kubectl is not on PATH: install kubectl"},
           {fake.Strata("submit " + Quickstart() + " --out " + sub + " --kubectl " + out.path +
                        "/nope"),
            "--kubectl " + out.path + "/nope: not an executable file"},
           {fake.Strata("status " + out.path + "/nothing"), "is not a run directory"},
           {fake.Strata("logs " + out.path), "neither a run directory"},
           {fake.Strata("delete " + out.path), "is not a Kubernetes submission"},
       }) {
    const CommandResult r = RunCommand(c.command);
    EXPECT_EQ(r.exit_code, 2) << c.command << "\n" << r.output;
    ExpectHas(r.output, c.message);
  }
  EXPECT_FALSE(Exists(sub)) << "a refused submission wrote files";
  EXPECT_TRUE(fake.Calls().empty()) << "a refused submission called kubectl";
}

TEST(Submit, LogsAndDeleteOnALocalRunDirectory) {
  const ScopedDir run("submit-local");
  WriteText(run.path + "/job.yaml", "name: x\n");
  std::filesystem::create_directories(run.path + "/logs");
  WriteText(run.path + "/logs/ps-0.log", "a\nb\nc\n");
  WriteText(run.path + "/logs/worker-0.log", "w\n");
  CommandResult r = RunCommand(Strata() + " logs " + run.path + " --service ps-0 --tail 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "b\nc\n");
  r = RunCommand(Strata() + " logs " + run.path);
  EXPECT_EQ(r.output, "==> ps-0 <==\na\nb\nc\n==> worker-0 <==\nw\n");
  // The service may be named without --service; a run that is not going is not followed.
  r = RunCommand(Strata() + " logs " + run.path + " worker-0 --follow");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "w\n");
  r = RunCommand(Strata() + " delete " + run.path);
  EXPECT_EQ(r.exit_code, 2);
  ExpectHas(r.output, "is a local run directory, not a Kubernetes submission");
}

// The objects `strata submit` creates are what `kubectl kustomize` builds from the files it
// rendered beside them (the generators' content hash and the owner and suspend fields aside),
// for the base and both overlays; and they pass the offline schema check.
std::string Canonical(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) {
    std::string s = "[";
    for (const YAML::Node& item : n) s += Canonical(item) + ",";
    return s + "]";
  }
  if (!n.IsMap()) return "~";
  std::vector<std::pair<std::string, std::string>> entries;
  for (const auto& kv : n) entries.push_back({kv.first.Scalar(), Canonical(kv.second)});
  std::sort(entries.begin(), entries.end());
  std::string s = "{";
  for (const auto& [k, v] : entries) s += k + ":" + v + ",";
  return s + "}";
}

std::vector<std::string> CanonicalObjects(const std::string& text) {
  std::vector<std::string> objects;
  for (YAML::Node d : Documents(text)) {
    d["metadata"].remove("ownerReferences");
    if (d["kind"].as<std::string>() == "Job" && d["spec"]["suspend"]) d["spec"].remove("suspend");
    // kustomize folds long base64 values over lines, which the API server ignores.
    if (d["kind"].as<std::string>() == "Secret") {
      for (auto kv : d["data"]) {
        d["data"][kv.first.Scalar()] = absl::StrReplaceAll(kv.second.Scalar(), {{"\n", ""}});
      }
    }
    objects.push_back(Canonical(d));
  }
  std::sort(objects.begin(), objects.end());
  return objects;
}

TEST(Submit, TheObjectsAreWhatKustomizeBuildsAndTheSchemaAccepts) {
  if (RunCommand("command -v kubectl").exit_code != 0) {
    STRATA_UNAVAILABLE(
        "kubectl is not installed (scripts/install-deps.sh installs Debian's "
        "kubernetes-client): nothing to compare with");
  }
  const std::string validator = Source() + "/scripts/k8s-validate";
  const bool schema = RunCommand("command -v node").exit_code == 0 &&
                      Exists(validator + "/node_modules/kubernetes-models/package.json");
  const ScopedDir submitted_files("submit-applied");
  std::string to_validate;
  for (const std::string& job :
       {Quickstart(), Source() + "/tests/data/render/ps-stragglers.yaml"}) {
    for (const std::string overlay : {"", "small", "large"}) {
      FakeKubectl fake;
      const ScopedDir out("submit-kustomize");
      const CommandResult r =
          RunCommand(fake.Strata("submit " + job + " --out " + out.path + " --detach" +
                                 (overlay.empty() ? "" : " --overlay " + overlay)));
      ASSERT_EQ(r.exit_code, 0) << r.output;
      const std::string submitted =
          fake.Applied(1) + "\n---\n" + fake.Applied(2) + "\n---\n" + fake.Applied(3);
      // The real kubectl, on the rendered files and the token submit wrote.
      const CommandResult built =
          KustomizeBuild(out.path, overlay.empty() ? "base" : "overlays/" + overlay);
      ASSERT_EQ(built.exit_code, 0) << built.output;
      const std::string unhashed = std::regex_replace(
          built.output, std::regex("(-(job-spec|topology|run-token))-[a-z0-9]{10}\\b"), "$1");
      EXPECT_EQ(CanonicalObjects(submitted), CanonicalObjects(unhashed)) << job << " " << overlay;
      const std::string copy = absl::StrCat(submitted_files.path, "/", to_validate.size(), ".yaml");
      WriteText(copy, submitted);
      to_validate += " " + copy;
    }
  }
  if (!schema) {
    STRATA_UNAVAILABLE(
        "compared with kustomize, but no schema check: node or "
        "scripts/k8s-validate/node_modules is missing (scripts/install-deps.sh)");
  }
  // One Node process for every file: loading the models dominates its time.
  const CommandResult v = RunCommand("node " + validator + "/validate.mjs" + to_validate);
  EXPECT_EQ(v.exit_code, 0) << v.output;
  EXPECT_NE(v.output.find("object(s) valid"), std::string::npos) << v.output;
}

}  // namespace
}  // namespace strata::testing
