// `strata switch RUN_DIR`: asks a running `switch` job to hand over to the parameter servers now.
// The request is a call on the orchestrator's control socket (run/control_server.h), or, for a run
// that publishes none (its orchestrator runs in a container), a file in the run directory that
// the orchestrator picks up within a polling period. The command then waits for the outcome in
// events.jsonl.

#include <chrono>
#include <cstdio>
#include <thread>

#include <nlohmann/json.hpp>

#include "orchestrator/commands.h"
#include "orchestrator/record/run_record.h"
#include "orchestrator/run/control_server.h"
#include "services/common/base/files.h"
#include "services/common/base/metrics.h"
#include "services/common/base/run_directory.h"

namespace strata::cli {
namespace {

int RequestSwitch(const std::string& dir, int wait_s) {
  RunPaths paths(dir);
  auto status_text = ReadFile(paths.status);
  if (!status_text.ok()) {
    std::fprintf(stderr, "strata switch: %s is not a run directory (no status.json)\n",
                 dir.c_str());
    return 2;
  }
  nlohmann::json status = nlohmann::json::parse(*status_text, nullptr, false);
  if (status.is_discarded() || status.value("state", "") != "running") {
    std::fprintf(stderr, "strata switch: the run in %s is not running (state %s)\n", dir.c_str(),
                 status.is_discarded() ? "unknown" : status.value("state", "unknown").c_str());
    return 1;
  }
  const std::string control_socket = status.value("control_socket", "");
  const OrchestratorLiveness liveness =
      ProbeOrchestrator(control_socket, status.value("updated", 0.0));
  if (liveness == OrchestratorLiveness::kGone) {
    std::fprintf(stderr, "strata switch: the orchestrator of %s is gone (%s)\n", dir.c_str(),
                 control_socket.empty() ? "status.json has not changed for a minute"
                                        : "nothing answers on its control socket");
    return 1;
  }
  if (status.value("strategy", "").rfind("switch", 0) != 0) {
    std::fprintf(stderr,
                 "strata switch: the run's strategy is '%s'; only strategy.kind: switch runs "
                 "parameter servers to switch to\n",
                 status.value("strategy", "").c_str());
    return 1;
  }
  if (status.value("switched", false)) {
    std::fprintf(stderr, "strata switch: the run has already switched\n");
    return 1;
  }
  size_t events_before = 0;
  if (auto events = ReadJsonLines(paths.events); events.ok()) events_before = events->size();
  const absl::Status requested =
      liveness == OrchestratorLiveness::kAlive
          ? RequestSwitchNow(control_socket, "strata switch", std::chrono::seconds(10))
          : WriteFileAtomic(paths.switch_request, "{\"requested_by\": \"strata switch\"}\n");
  if (!requested.ok()) {
    std::fprintf(stderr, "strata switch: %s\n", std::string(requested.message()).c_str());
    return 1;
  }
  std::printf("switch requested for %s\n", dir.c_str());
  std::fflush(stdout);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(wait_s);
  while (wait_s > 0 && std::chrono::steady_clock::now() < until) {
    auto events = ReadJsonLines(paths.events);
    if (events.ok()) {
      for (size_t i = events_before; i < events->size(); ++i) {
        const auto& e = (*events)[i];
        const std::optional<RunEvent> event = RunEventOf(e);
        if (event == RunEvent::kSwitchDone) {
          const SwitchDoneEvent done = SwitchDoneEvent::FromJson(e);
          std::printf("switched at step %lld (epoch %.2f), handover %.3f s\n",
                      static_cast<long long>(done.at_step), done.epoch.value_or(0.0),
                      done.handover_s.value_or(0.0));
          return 0;
        }
        if (event == RunEvent::kSwitchFailed || event == RunEvent::kSwitchSkipped ||
            event == RunEvent::kSwitchRequestIgnored || event == RunEvent::kRunFailed) {
          std::fprintf(stderr, "strata switch: %s: %s\n", RunEventName(*event), e.dump().c_str());
          return 1;
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // following a file
  }
  if (wait_s > 0) {
    std::fprintf(stderr, "strata switch: no outcome within %d s; see %s\n", wait_s,
                 paths.events.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

void AddSwitchCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand("switch", "switch a running job to the parameter servers now");
  auto dir = std::make_shared<std::string>();
  auto wait_s = std::make_shared<int>(300);
  cmd->add_option("run_dir", *dir, "run directory of a running `strata run`")->required();
  cmd->add_option("--wait-s", *wait_s, "wait this long for switch_done (0: do not wait)");
  cmd->callback([=] { *exit_code = RequestSwitch(*dir, *wait_s); });
}

}  // namespace strata::cli
