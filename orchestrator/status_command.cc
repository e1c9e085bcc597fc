// `strata status RUN_DIR`: where a running or finished run stands, from its run directory alone;
// for a Kubernetes submission directory (`strata submit`), from the cluster through kubectl.
#include <signal.h>

#include <cerrno>
#include <cstdio>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <nlohmann/json.hpp>

#include "orchestrator/commands.h"
#include "orchestrator/lib/kubernetes_submission.h"
#include "orchestrator/record/pdp_rounds.h"
#include "orchestrator/record/run_record.h"
#include "orchestrator/run/control_server.h"
#include "services/common/base/files.h"
#include "services/common/base/metrics.h"
#include "services/common/base/run_directory.h"

namespace strata::cli {
namespace {

std::string Num(const std::optional<double>& v, const char* format) {
  if (!v) return "--";
  return absl::StrFormat(format, *v);
}

std::string Num(const nlohmann::json& j, const char* key, const char* format) {
  if (!j.contains(key) || !j[key].is_number()) return "--";
  return Num(j[key].get<double>(), format);
}

// A stream run (strategy.kind stream) has no epochs and no evaluations: its progress is in events,
// and its backlog is the broker's (the lag and what each replica holds unacknowledged).
int ShowStreamStatus(const std::string& dir, const nlohmann::json& status,
                     const nlohmann::json& summary) {
  std::string state = status.value("state", "unknown");
  if (state == "running" &&
      ProbeOrchestrator(status.value("control_socket", ""), status.value("updated", 0.0)) ==
          OrchestratorLiveness::kGone) {
    state = "abandoned (the orchestrator is gone)";
  }
  std::printf("run:       %s\n", dir.c_str());
  std::printf("state:     %s\n", state.c_str());
  std::printf("job:       %s, strategy stream, %d replica(s)\n", status.value("name", "").c_str(),
              status.value("replicas", 0));
  std::printf("events:    %lld in the stream, %lld handed out, %lld trained (%s/s), %s s\n",
              static_cast<long long>(status.value("stream_length", int64_t{0})),
              static_cast<long long>(status.value("handed_out", int64_t{0})),
              static_cast<long long>(status.value("events_trained", int64_t{0})),
              Num(status, "trained_per_s", "%.0f").c_str(), Num(status, "wall_s", "%.1f").c_str());
  std::printf("backlog:   lag %lld (not yet handed out), pending %lld (handed out, not acknowledged)\n",
              static_cast<long long>(status.value("lag", int64_t{0})),
              static_cast<long long>(status.value("pending", int64_t{0})));
  if (status.contains("pending_per_replica") && status["pending_per_replica"].is_object()) {
    for (const auto& [consumer, count] : status["pending_per_replica"].items()) {
      std::printf("  %-12s pending %s\n", consumer.c_str(), count.dump().c_str());
    }
  }
  std::printf("training:  loss %s, accuracy before training %s\n", Num(status, "loss", "%.4f").c_str(),
              Num(status, "prequential_accuracy", "%.4f").c_str());
  if (summary.is_object() && summary.contains("latency_p99_ms")) {
    std::printf("latency:   production to training p50 %s ms, p99 %s ms (each replica's latest "
                "100,000 events, the worst replica)\n",
                Num(summary, "latency_p50_ms", "%.1f").c_str(),
                Num(summary, "latency_p99_ms", "%.1f").c_str());
  } else if (status.contains("latency_p99_ms")) {
    std::printf("latency:   production to training p50 %s ms, p99 %s ms (latest second, worst replica)\n",
                Num(status, "latency_p50_ms", "%.1f").c_str(),
                Num(status, "latency_p99_ms", "%.1f").c_str());
  }
  if (summary.is_object() && summary.contains("predictions")) {
    const nlohmann::json& p = summary["predictions"];
    std::printf("predict:   %s of %s questions answered, p50 %s ms, p99 %s ms, max %s ms, %s right\n",
                p.value("answered", nlohmann::json(0)).dump().c_str(),
                p.value("sent", nlohmann::json(0)).dump().c_str(), Num(p, "p50_ms", "%.2f").c_str(),
                Num(p, "p99_ms", "%.2f").c_str(), Num(p, "max_ms", "%.2f").c_str(),
                Num(p, "accuracy", "%.4f").c_str());
  } else if (status.contains("predictions_answered")) {
    std::printf("predict:   %s questions answered, p99 %s ms (latest second)\n",
                status["predictions_answered"].dump().c_str(),
                Num(status, "predict_p99_ms", "%.2f").c_str());
  }
  if (status.contains("orchestrator_metrics") && status["orchestrator_metrics"].is_string()) {
    std::printf("metrics:   %s\n", status["orchestrator_metrics"].get<std::string>().c_str());
  }
  if (summary.is_object()) {
    std::printf("final:     %s events trained, %s events/s, apply_once %s, agree %s (%s)%s%s\n",
                summary.value("events_trained", nlohmann::json(0)).dump().c_str(),
                Num(summary, "events_per_s", "%.0f").c_str(),
                summary.value("apply_once", false) ? "true" : "false",
                summary.value("agree", false) ? "true" : "false",
                Num(summary, "agreement_relative", "%.1e").c_str(),
                summary.contains("error") ? "; error: " : "",
                summary.value("error", "").c_str());
  }
  return 0;
}

int ShowStatus(const std::string& dir) {
  RunPaths paths(dir);
  if (!ReadFile(paths.job_yaml).ok()) {
    std::fprintf(stderr, "strata status: %s is not a run directory (no job.yaml)\n", dir.c_str());
    return 2;
  }
  nlohmann::json status = ReadJsonFile(paths.status);
  nlohmann::json summary = ReadJsonFile(paths.summary);
  if ((status.is_object() && status.value("strategy", "") == "stream") ||
      (summary.is_object() && summary.value("strategy", "") == "stream")) {
    return ShowStreamStatus(dir, status.is_object() ? status : nlohmann::json::object(), summary);
  }
  std::vector<nlohmann::json> metrics;
  if (auto m = ReadJsonLines(paths.metrics); m.ok()) metrics = std::move(*m);
  std::vector<nlohmann::json> events;
  if (auto e = ReadJsonLines(paths.events); e.ok()) events = std::move(*e);

  std::string state = status.is_object() ? status.value("state", "unknown") : "unknown";
  if (state == "running") {
    switch (ProbeOrchestrator(status.value("control_socket", ""), status.value("updated", 0.0))) {
      case OrchestratorLiveness::kAlive:
        break;
      case OrchestratorLiveness::kGone:
        state = "abandoned (the orchestrator is gone)";
        break;
      case OrchestratorLiveness::kUnknown:
        state = "running (not confirmed: the run publishes no control socket)";
        break;
    }
  }
  std::printf("run:       %s\n", dir.c_str());
  std::printf("state:     %s\n", state.c_str());
  if (status.is_object()) {
    std::printf("job:       %s, strategy %s\n", status.value("name", "").c_str(),
                status.value("strategy", "").c_str());
    std::printf("progress:  epoch %s of %d, phase %s, %s samples/s, %s s\n",
                Num(status, "epoch", "%.2f").c_str(), status.value("epochs", 0),
                status.value("phase", "").c_str(), Num(status, "samples_per_s", "%.0f").c_str(),
                Num(status, "wall_s", "%.1f").c_str());
  }
  if (!metrics.empty()) {
    const auto& m = metrics.back();
    std::printf("last eval: epoch %d (%s): val_loss %s, val_acc %s\n", m.value("epoch", 0),
                m.value("phase", "").c_str(), Num(m, "val_loss", "%.4f").c_str(),
                Num(m, "val_acc", "%.4f").c_str());
  }
  for (const auto& e : events) {
    const std::optional<RunEvent> event = RunEventOf(e);
    if (event == RunEvent::kSwitchDecided) {
      const SwitchDecidedRecord decided = SwitchDecidedRecord::FromJson(e);
      std::printf("switch:    decided by %s at epoch %lld: %s\n", decided.trigger.c_str(),
                  static_cast<long long>(decided.epoch), decided.reason.c_str());
    } else if (event == RunEvent::kSwitchDone) {
      const SwitchDoneEvent done = SwitchDoneEvent::FromJson(e);
      std::printf("switch:    done at step %lld (epoch %s), handover %s s\n",
                  static_cast<long long>(done.at_step), Num(done.epoch, "%.2f").c_str(),
                  Num(done.handover_s, "%.3f").c_str());
    } else if (event == RunEvent::kRunFailed) {
      std::printf("error:     %s\n", RunFailedEvent::FromJson(e).error.c_str());
    } else if (event == RunEvent::kResumed) {
      const nlohmann::json steps = e.value("steps", nlohmann::json::array());
      std::printf("resumed:   by strata resume, in %s at step %s%s\n",
                  e.value("phase", "?").c_str(), steps.empty() ? "0" : steps[0].dump().c_str(),
                  e.value("checkpoint", "").empty()
                      ? ""
                      : absl::StrCat(" from ", e.value("checkpoint", "")).c_str());
    }
  }
  if (auto rounds = ReadJsonLines(paths.pdp_rounds); rounds.ok()) {
    for (const std::string& line : PdpRoundsLines(SummarisePdpRounds(*rounds))) {
      std::printf("%s\n", line.c_str());
    }
  }
  if (summary.is_object()) {
    std::printf(
        "final:     val_acc %s, val_loss %s, %s s\n", Num(summary, "final_val_acc", "%.4f").c_str(),
        Num(summary, "final_val_loss", "%.4f").c_str(), Num(summary, "wall_s", "%.1f").c_str());
  }
  if (status.is_object() && state.rfind("running", 0) == 0 &&
      status.contains("orchestrator_metrics") && status["orchestrator_metrics"].is_string()) {
    // The orchestrator's own endpoint (the restarts it made, the run's phase), while it runs.
    std::printf("  %-12s pid %-7d %-22s %s metrics %s\n", "orchestrator",
                status.value("orchestrator_pid", 0), "", "running",
                status["orchestrator_metrics"].get<std::string>().c_str());
  }
  if (status.is_object() && status.contains("processes")) {
    for (const auto& p : status["processes"]) {
      // Where Prometheus scrapes it, while it runs (an ended process's port may be anyone's).
      const bool running = p.value("running", false);
      const std::string metrics = running && p.contains("metrics") && p["metrics"].is_string()
                                      ? p["metrics"].get<std::string>()
                                      : "";
      std::printf("  %-12s pid %-7d %-22s %s%s\n", p.value("name", "").c_str(), p.value("pid", 0),
                  p.value("address", "").c_str(), running ? "running" : "ended",
                  metrics.empty() ? "" : (" metrics " + metrics).c_str());
    }
  }
  return 0;
}

}  // namespace

void AddStatusCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand("status", "show where a running or finished run stands");
  auto dir = std::make_shared<std::string>();
  auto kubernetes = std::make_shared<SubmissionCommandOptions>();
  auto kubectl_timeout = std::make_shared<double>(60);
  cmd->add_option("run_dir", *dir, "run directory, or a Kubernetes submission directory")
      ->required();
  cmd->add_option("--kubectl", kubernetes->kubectl,
                  "submissions: the kubectl to run (default: the one the submission used)");
  cmd->add_option("--kubectl-timeout", *kubectl_timeout,
                  "submissions: seconds one kubectl call may take (default 60)");
  cmd->callback([=] {
    if (FindSubmissionDir(*dir)) {
      kubernetes->kubectl_timeout =
          std::chrono::milliseconds(static_cast<long long>(*kubectl_timeout * 1000));
      *exit_code = ShowSubmissionStatus(*dir, *kubernetes);
    } else {
      *exit_code = ShowStatus(*dir);
    }
  });
}

}  // namespace strata::cli
