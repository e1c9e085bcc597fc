// What a run writes about itself: the progress line, status.json (about once a second) and, at
// the end, summary.json and the report (orchestrator/record/ builds the files).
#include <algorithm>
#include <cmath>
#include <ctime>

#include <unistd.h>

#include <absl/strings/str_format.h>

#include "orchestrator/lib/run_driver.h"
#include "orchestrator/record/pdp_rounds.h"
#include "orchestrator/record/report.h"
#include "orchestrator/record/run_files.h"
#include "services/common/base/metrics.h"
#include "services/common/process/progress.h"

namespace strata {
namespace {

std::string Duration(double s) {
  if (!std::isfinite(s) || s < 0) return "--";
  const int total = static_cast<int>(s + 0.5);
  if (total >= 60) return absl::StrFormat("%dm%02ds", total / 60, total % 60);
  return absl::StrFormat("%ds", total);
}

}  // namespace

void RunDriver::Finish(const std::string& state) {
  finish_ = Clock::now();
  state_ = state;
  if (!record_) return;
  WriteStatus();
  WriteSummary(state);
  if (absl::Status r = WriteRunReport(paths_.root); !r.ok()) {
    std::fprintf(stderr, "%s: cannot write the report: %s\n", command(),
                 std::string(r.message()).c_str());
  }
  record_->Event(RunEvent::kRunFinished,
                 {{"state", state}, {"wall_s", SecondsBetween(start_, finish_)}});
}

void RunDriver::ShowProgress(const ClusterView& view, Clock::time_point now) {
  if (console_.progress_live()) {
    const double f = view.GlobalEpochFraction() / job_.training().epochs();
    const double elapsed = SecondsBetween(train_start_, now);
    // The pace is this process's: a resumed run started at `f0`, not at 0.
    const double f0 =
        static_cast<double>(StepsBeforeResume()) /
        std::max<double>(1, static_cast<double>(job_.cluster().workers()) *
                                view_.planned_steps_per_epoch * job_.training().epochs());
    const double eta = f - f0 > 0.01 ? elapsed * (1 - f) / (f - f0) : NAN;
    const auto& last = eval_->last_metrics();
    std::string metrics =
        last ? absl::StrFormat("val_loss %.4f val_acc %.4f", last->val_loss(), last->val_acc())
             : "val --";
    console_.Progress(absl::StrFormat("epoch %.2f/%d %s %-9s %s  %5.0f samples/s  ETA %s",
                                      view.GlobalEpochFraction(), job_.training().epochs(),
                                      Bar(f, 20), phase_.name, metrics, view.SamplesPerSecond(),
                                      Duration(eta)));
  }
  // report.html as often as the page reloads itself (best effort: Finish writes the last one).
  if (now - last_report_write_ >= std::chrono::seconds(kReportRefreshSeconds)) {
    WriteRunReport(paths_.root).IgnoreError();
    last_report_write_ = now;
  }
}

void RunDriver::RecordStatus(Clock::time_point now, bool changed) {
  if (!changed && now - last_status_write_ < std::chrono::seconds(1)) return;
  WriteStatus();
  last_status_write_ = now;
}

void RunDriver::WriteStatus() {
  RunStatusSnapshot s;
  s.state = state_;
  s.name = job_.name();
  s.orchestrator_pid = ::getpid();
  // Gone with the run: a finished run's status names no socket.
  if (control_ && state_ == "running") s.control_socket = control_->socket_path();
  s.strategy = StrategyText(job_.strategy());
  s.phase = phase_.name;
  s.epoch = view_.GlobalEpochFraction();
  s.epochs = job_.training().epochs();
  s.samples_per_s = view_.SamplesPerSecond();
  s.switched = switched();
  if (eval_ && eval_->last_metrics()) {
    s.last_val_loss = eval_->last_metrics()->val_loss();
    s.last_val_acc = eval_->last_metrics()->val_acc();
  }
  s.wall_s = SecondsBetween(start_, Clock::now());
  s.updated = static_cast<double>(std::time(nullptr));
  if (launcher_) s.processes = launcher_->Snapshot();
  s.workers = view_.workers;
  if (run_metrics_) s.orchestrator_metrics = run_metrics_->url();
  record_->WriteStatus(StatusJson(s));
  if (run_metrics_) run_metrics_->Update(s);
  std::lock_guard<std::mutex> lock(run_info_mu_);
  run_info_.set_name(job_.name());
  run_info_.set_run_dir(paths_.root);
  run_info_.set_pid(::getpid());
  run_info_.set_strategy(s.strategy);
  run_info_.set_phase(s.phase);
  run_info_.set_switch_job(job_.strategy().kind() == v1::STRATEGY_KIND_SWITCH);
  run_info_.set_switched(s.switched || switched_before_resume());
  run_info_.set_switch_in_progress(switcher_ && switcher_->in_progress());
  // Where the model is now, as the next evaluation would fetch it.
  evaluator_address_.clear();
  model_source_.Clear();
  std::vector<std::string> servers;
  for (const ProcessSnapshot& p : s.processes) {
    if (!p.running || p.address.empty()) continue;
    if (p.name == "evaluator") evaluator_address_ = p.address;
    if (p.name == "worker-0" && phase_.name != "ps") model_source_.set_worker(p.address);
    if (p.name.rfind("ps-", 0) == 0) servers.push_back(p.name + " " + p.address);
  }
  if (phase_.name == "ps") {
    // In partition order: ps-0, ps-1, ... (ps-10 after ps-9).
    std::sort(servers.begin(), servers.end(), [](const std::string& a, const std::string& b) {
      return a.size() != b.size() ? a.size() < b.size() : a < b;
    });
    for (const std::string& entry : servers) {
      model_source_.add_parameter_servers(entry.substr(entry.find(' ') + 1));
    }
  }
}

void RunDriver::WriteSummary(const std::string& state) {
  RunSummarySnapshot s;
  const auto end = training_end_.value_or(finish_);
  if (train_start_ != Clock::time_point{}) {
    const double samples_per_step = view_.worker_batch;
    // Only this process's steps count: a resumed run's workers start at the steps done before.
    const int64_t earlier = StepsBeforeResume();
    if (switched()) {
      const SwitchOutcome& o = *switcher_->outcome();
      const int64_t before = o.switch_step * static_cast<int64_t>(job_.cluster().workers());
      s.samples_per_s["allreduce"] = (before - earlier) * samples_per_step /
                                     std::max(1e-9, SecondsBetween(train_start_, o.paused));
      s.samples_per_s["ps"] = (view_.TotalSteps() - before) * samples_per_step /
                              std::max(1e-9, SecondsBetween(o.resumed, end));
    } else {
      s.samples_per_s[phase_.name] = (view_.TotalSteps() - earlier) * samples_per_step /
                                     std::max(1e-9, SecondsBetween(train_start_, end));
    }
    s.training_s = SecondsBetween(train_start_, end);
    // The worker's own rate covers its current phase (it restarts the count at the switch);
    // the all-reduce phase moves in lockstep, so its rate is the cluster's per worker.
    for (size_t rank = 0; rank < view_.workers.size(); ++rank) {
      const v1::WorkerStatus& w = view_.workers[rank];
      nlohmann::json rates = nlohmann::json::object();
      if (switched()) {
        rates["allreduce"] = s.samples_per_s["allreduce"].get<double>() / job_.cluster().workers();
        rates["ps"] = w.samples_per_s();
      } else {
        rates[phase_.name] = w.samples_per_s();
      }
      s.workers_measured.push_back({{"rank", rank}, {"steps", w.step()}, {"samples_per_s", rates}});
    }
    if (switched()) {
      const SwitchOutcome& o = *switcher_->outcome();
      s.switched = RunSummarySnapshot::Switch{o.epoch, o.switch_step, o.handover_s};
    } else if (switched_before_resume()) {
      const SwitchDoneEvent& done = *resume_->switch_done;
      s.switched = RunSummarySnapshot::Switch{done.epoch.value_or(0), done.at_step,
                                              done.handover_s.value_or(0)};
    }
  }
  s.name = job_.name();
  s.state = state;
  if (failure_.failed()) s.error = std::string(failure_.status().message());
  s.failed_process = failure_.process();
  s.strategy = StrategyText(job_.strategy());
  s.arch = ModelText(job_);
  s.dataset = Spelled(job_.dataset().name());
  s.workers = job_.cluster().workers();
  s.parameter_servers = UsesServers(job_) ? job_.cluster().parameter_servers() : 0;
  s.epochs_planned = job_.training().epochs();
  if (eval_ && eval_->last_metrics()) {
    s.epochs = eval_->last_metrics()->epoch();
    s.last_val_acc = eval_->last_metrics()->val_acc();
  }
  if (eval_ && eval_->have_final()) {
    s.final_val_acc = eval_->final_metrics().val_acc();
    s.final_val_loss = eval_->final_metrics().val_loss();
  }
  s.wall_s = SecondsBetween(start_, finish_);
  s.processes = launcher_->Snapshot();
  if (recovery_) s.restarts = recovery_->restarts();
  s.handover_check = handover_check_;
  if (resume_) s.resumes = resume_->earlier_resumes + 1;
  if (auto rounds = ReadJsonLines(paths_.pdp_rounds); rounds.ok()) {
    s.pdp_rounds = PdpRoundsJson(SummarisePdpRounds(*rounds));
  }
  record_->WriteSummary(SummaryJson(s));
}

int64_t RunDriver::StepsBeforeResume() const {
  if (!resume_) return 0;
  int64_t total = 0;
  for (int64_t steps : resume_->StepsByRank(job_.cluster().workers())) total += steps;
  return total;
}

}  // namespace strata
