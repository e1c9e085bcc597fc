#include "orchestrator/record/run_files.h"

namespace strata {
namespace {

using nlohmann::json;

template <typename T>
json OrNull(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}
json OrNull(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

}  // namespace

json StatusJson(const RunStatusSnapshot& s) {
  json processes = json::array();
  for (const ProcessSnapshot& p : s.processes) {
    processes.push_back({{"name", p.name},
                         {"pid", p.pid},
                         {"address", p.address},
                         {"running", p.running},
                         {"metrics", OrNull(p.metrics)}});
  }
  json workers = json::array();
  for (size_t r = 0; r < s.workers.size(); ++r) {
    const v1::WorkerStatus& w = s.workers[r];
    workers.push_back({{"rank", r},
                       {"epoch", w.epoch()},
                       {"step", w.step()},
                       {"finished", w.finished()},
                       {"mode", w.mode() == v1::SYNC_MODE_PS ? "ps" : "allreduce"},
                       {"samples_per_s", w.samples_per_s()},
                       {"train_loss", w.train_loss()}});
  }
  return {{"state", s.state},
          {"name", s.name},
          {"orchestrator_pid", s.orchestrator_pid},
          {"control_socket", s.control_socket},
          {"orchestrator_metrics", OrNull(s.orchestrator_metrics)},
          {"strategy", s.strategy},
          {"phase", s.phase},
          {"epoch", s.epoch},
          {"epochs", s.epochs},
          {"samples_per_s", s.samples_per_s},
          {"switched", s.switched},
          {"last_val_loss", OrNull(s.last_val_loss)},
          {"last_val_acc", OrNull(s.last_val_acc)},
          {"wall_s", s.wall_s},
          {"updated", s.updated},
          {"processes", processes},
          {"workers", workers}};
}

json SummaryJson(const RunSummarySnapshot& s) {
  json processes = json::array();
  for (const ProcessSnapshot& p : s.processes) {
    processes.push_back({{"name", p.name}, {"pid", p.pid}, {"exit", p.exit}});
  }
  std::optional<double> switch_epoch, switch_handover;
  std::optional<int64_t> switch_step;
  if (s.switched) {
    switch_epoch = s.switched->epoch;
    switch_step = s.switched->step;
    switch_handover = s.switched->handover_s;
  }
  return {
      {"name", s.name},
      {"state", s.state},
      {"error", OrNull(s.error)},
      {"failed_process", OrNull(s.failed_process)},
      {"strategy", s.strategy},
      {"arch", s.arch},
      {"dataset", s.dataset},
      {"workers", s.workers},
      {"parameter_servers", s.parameter_servers},
      {"epochs", s.epochs},
      {"epochs_planned", s.epochs_planned},
      {"final_val_acc", OrNull(s.final_val_acc)},
      {"final_val_loss", OrNull(s.final_val_loss)},
      {"last_val_acc", OrNull(s.last_val_acc)},
      {"wall_s", s.wall_s},
      {"training_s", OrNull(s.training_s)},
      {"restarts", s.restarts},
      {"resumes", s.resumes},
      {"pdp_rounds", s.pdp_rounds},
      {"switch_epoch", OrNull(switch_epoch)},
      {"switch_step", OrNull(switch_step)},
      {"switch_handover_s", OrNull(switch_handover)},
      {"handover_check", s.handover_check},
      {"samples_per_s", s.samples_per_s},
      {"per_worker", s.workers_measured},
      {"processes", processes},
  };
}

}  // namespace strata
