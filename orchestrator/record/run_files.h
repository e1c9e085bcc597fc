// status.json (rewritten while the run goes) and summary.json (written when it ends), built from
// typed snapshots of the run so that the JSON keys are spelt in one place.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "strata/v1/worker.pb.h"

namespace strata {

struct ProcessSnapshot {
  std::string name;
  int pid = 0;  // 0: not started
  std::string address;
  bool running = false;
  std::string exit;     // how it ended, once it did
  std::string metrics;  // its Prometheus endpoint, http://host:port/metrics, once known
  int restarts = 0;     // times the orchestrator started it again (recovery.restarts)
};

struct RunStatusSnapshot {
  std::string state;  // running | succeeded | failed | interrupted
  std::string name;
  int orchestrator_pid = 0;
  std::string control_socket;  // where `strata switch` and `strata status` call (empty: none)
  // The orchestrator's own Prometheus endpoint, http://host:port/metrics (empty: none).
  std::string orchestrator_metrics;
  std::string strategy;
  std::string phase;
  double epoch = 0;  // global epochs, fractional
  int epochs = 0;
  double samples_per_s = 0;
  bool switched = false;
  std::optional<double> last_val_loss, last_val_acc;
  double wall_s = 0;
  double updated = 0;  // seconds since the Unix epoch
  std::vector<ProcessSnapshot> processes;
  std::vector<v1::WorkerStatus> workers;
};

nlohmann::json StatusJson(const RunStatusSnapshot& s);

struct RunSummarySnapshot {
  std::string name, state;
  std::string error;           // empty: none
  std::string failed_process;  // empty: none
  std::string strategy, arch, dataset;
  int workers = 0, parameter_servers = 0;
  int64_t epochs = 0;  // of the last evaluation
  int epochs_planned = 0;
  std::optional<double> final_val_acc, final_val_loss, last_val_acc;
  double wall_s = 0;
  std::optional<double> training_s;
  struct Switch {
    double epoch = 0;
    int64_t step = 0;
    double handover_s = 0;
  };
  std::optional<Switch> switched;
  nlohmann::json samples_per_s = nlohmann::json::object();  // by phase
  // Per worker: rank, steps, and samples/s by phase as the worker measured it, so a reader can
  // see that CPU quotas held (and how much of the job each worker did after the switch).
  nlohmann::json workers_measured = nlohmann::json::array();
  std::vector<ProcessSnapshot> processes;
  int restarts = 0;  // dead workers and servers started again (events.jsonl: restart)
  int resumes = 0;   // times `strata resume` took the run up (events.jsonl: resumed)
  // The live switch's handover check (HandoverVerification::ToJson), whether the switch was done
  // or failed on it; null without a handover in this run.
  nlohmann::json handover_check = nullptr;
  // pdp and apdp: the rounds summed up (pdp_rounds.h, PdpRoundsJson); null otherwise.
  nlohmann::json pdp_rounds = nullptr;
};

nlohmann::json SummaryJson(const RunSummarySnapshot& s);

}  // namespace strata
