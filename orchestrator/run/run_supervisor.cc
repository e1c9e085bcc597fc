#include "orchestrator/run/run_supervisor.h"

#include <algorithm>
#include <thread>

#include <absl/strings/str_cat.h>

#include "services/common/base/status.h"

namespace strata {

RunSupervisor::RunSupervisor(SupervisorOptions options, SupervisedRun run)
    : options_(std::move(options)), run_(run) {
  const size_t n = static_cast<size_t>(run_.client.worker_count());
  last_answer_.assign(n, Clock::now());
  error_since_.assign(n, std::nullopt);
  links_recorded_.assign(n, {});
  run_.view.workers.resize(n);
  run_.view.loss_by_epoch.resize(n);
}

absl::Status RunSupervisor::Run() {
  while (!finished_) {
    const Clock::time_point now = Clock::now();
    const bool switching = run_.switcher != nullptr && run_.switcher->in_progress();
    if (absl::Status s = Pass(now); !s.ok()) {
      if (switching) {
        // The switch cannot complete: record it as the switch's failure too, withdraw the
        // requests and end the services at once.
        run_.switcher->Abandon(run_.failure.failed() ? run_.failure.process() : "", s);
        run_.host.StopAll();
      }
      return s;
    }
    if (!finished_) SleepUntilNextPass(now);
  }
  return absl::OkStatus();
}

absl::Status RunSupervisor::Pass(Clock::time_point now) {
  STRATA_ASSIGN_OR_RETURN(std::vector<ServiceExit> exits, run_.host.CheckProcesses());
  for (const ServiceExit& exit : exits) STRATA_RETURN_IF_ERROR(TakeExit(exit, now));
  STRATA_RETURN_IF_ERROR(RestartAfterFallBack(now));
  if (run_.recovery != nullptr) STRATA_RETURN_IF_ERROR(run_.recovery->Step(run_.view, now));
  run_.host.RecordStatus(now, !exits.empty());
  if (!training_end_) {
    const bool held = run_.switcher != nullptr && run_.switcher->holds_cluster();
    if (!held && now >= next_tick_) {
      next_tick_ = now + options_.tick;
      STRATA_RETURN_IF_ERROR(PollWorkers(now));
      PollServers();
      STRATA_RETURN_IF_ERROR(run_.eval.Step(run_.view, now));
      run_.host.ShowProgress(run_.view, now);
    }
    STRATA_RETURN_IF_ERROR(StepSwitch(now));
    const bool switching = run_.switcher != nullptr && run_.switcher->in_progress();
    if (!run_.view.AllFinished() || switching) return absl::OkStatus();
    training_end_ = now;
    run_.record.Event(RunEvent::kTrainingFinished, {{"steps", run_.view.TotalSteps()}});
  }
  STRATA_RETURN_IF_ERROR(run_.eval.StepFinal(run_.view, now));
  if (!run_.eval.final_settled()) return absl::OkStatus();
  finished_ = true;
  if (!run_.eval.have_final()) {
    return run_.failure.Fail(
        "evaluator", absl::InternalError("the final evaluation failed; see logs/evaluator.log"));
  }
  return absl::OkStatus();
}

absl::Status RunSupervisor::PollWorkers(Clock::time_point now) {
  for (size_t r = 0; r < last_answer_.size(); ++r) {
    const std::string name = absl::StrCat("worker-", r);
    const bool awaiting = std::any_of(awaiting_fallback_.begin(), awaiting_fallback_.end(),
                                      [&](const ServiceExit& e) { return e.service == name; });
    if (awaiting || (run_.recovery != nullptr && run_.recovery->recovering(name))) {
      last_answer_[r] = now;  // silent while it restarts; its last status stands meanwhile
      error_since_[r].reset();
      continue;
    }
    auto status = run_.client.GetWorkerStatus(static_cast<int>(r), options_.status_timeout);
    if (!status.ok()) {
      if (now - last_answer_[r] > options_.unresponsive_timeout) {
        return run_.failure.Fail(
            name,
            absl::UnavailableError(absl::StrCat(
                "worker ", r, " at ", options_.worker_addresses[r], " has not answered for ",
                options_.unresponsive_timeout.count() / 1000, " s: ", status.status().message())));
      }
      continue;
    }
    last_answer_[r] = now;
    run_.view.Record(r, *status);
    std::vector<std::string> links(status->server_links().begin(), status->server_links().end());
    if (!links.empty() && links != links_recorded_[r]) {
      // Whether a worker reaches its servers through shared memory or over TCP (and why) is
      // decided in the worker; the run's record says it once per change.
      run_.record.Event(RunEvent::kServerLinks, {{"process", name}, {"links", links}});
      links_recorded_[r] = std::move(links);
    }
    if (!status->error().empty()) {
      // Often the error reports a peer that died (the ring broke): then the dead process is the
      // cause to name. A killed process's sockets close before its exit can be collected, so the
      // exit has a moment to show (CheckProcesses runs on every pass) before this worker is blamed.
      if (!error_since_[r]) error_since_[r] = now;
      if (now - *error_since_[r] >= options_.peer_exit_grace) {
        return run_.failure.Fail(
            name, absl::AbortedError(absl::StrCat("worker ", r, " stopped: ", status->error())));
      }
    }
  }
  return absl::OkStatus();
}

void RunSupervisor::PollServers() {
  if (run_.recovery == nullptr || run_.phase.name != "ps") return;
  for (int p = 0; p < run_.client.server_count(); ++p) {
    if (run_.recovery->recovering(absl::StrCat("ps-", p))) continue;
    auto status = run_.client.GetServerStatus(p, options_.status_timeout);
    if (status.ok()) run_.recovery->ObserveServer(p, *status);
  }
}

absl::Status RunSupervisor::TakeExit(const ServiceExit& exit, Clock::time_point now) {
  if (run_.recovery == nullptr) return run_.failure.Fail(exit.service, exit.failure);
  if (FallBack(exit)) return absl::OkStatus();
  RecoveryWindow window;
  window.asynchronous = run_.phase.name == "ps";
  window.switching = run_.switcher != nullptr && run_.switcher->in_progress();
  window.ring_reformable = !options_.switch_job && run_.phase.name == "allreduce";
  return run_.recovery->OnExit(exit, run_.view, window, now);
}

bool RunSupervisor::FallBack(const ServiceExit& exit) {
  SwitchController* switcher = run_.switcher;
  if (switcher == nullptr || exit.role != ServiceRole::kWorker || run_.phase.name == "ps" ||
      !run_.recovery->may_restart(exit.service)) {
    return false;
  }
  const int rank = ServiceIndex(exit.service);
  if (rank < 0) return false;
  if (!awaiting_fallback_.empty()) {
    // A second death while the first one's fallback is under way: that switch needs its
    // survivors, so this one ends the run (through the recovery's refusal).
    return false;
  }
  if (!switcher->idle()) return false;
  switcher->Offer(SwitchPolicy::RingBroken(run_.view, rank, exit.how));
  awaiting_fallback_.push_back(exit);
  return true;
}

absl::Status RunSupervisor::RestartAfterFallBack(Clock::time_point now) {
  if (awaiting_fallback_.empty() || run_.phase.name != "ps") return absl::OkStatus();
  std::vector<ServiceExit> exits = std::move(awaiting_fallback_);
  awaiting_fallback_.clear();
  for (const ServiceExit& exit : exits) {
    STRATA_RETURN_IF_ERROR(
        run_.recovery->OnExit(exit, run_.view, RecoveryWindow{true, false}, now));
  }
  return absl::OkStatus();
}

absl::Status RunSupervisor::StepSwitch(Clock::time_point now) {
  SwitchController* switcher = run_.switcher;
  // A request during a switch waits for its outcome, and is then answered "already switched".
  if (switcher == nullptr || !switcher->in_progress()) {
    if (run_.host.TakeSwitchRequest()) {
      if (!options_.switch_job) {
        run_.record.Event(RunEvent::kSwitchRequestIgnored,
                          {{"reason", "strategy.kind is not switch: no parameter servers run"}});
      } else if (switcher == nullptr || switcher->settled()) {  // null: switched, then resumed
        run_.record.Event(RunEvent::kSwitchRequestIgnored,
                          {{"reason", "the run has already switched"}});
      } else {
        switcher->Offer(SwitchPolicy::Manual(run_.view));
      }
    }
  }
  if (switcher == nullptr) return absl::OkStatus();
  if (switcher->idle()) {
    if (auto trigger = run_.policy.Observe(run_.view)) switcher->Offer(std::move(*trigger));
  }
  STRATA_RETURN_IF_ERROR(switcher->Step(run_.view, now));
  if (switcher->outcome() && !run_.phase.switched_at_step) {
    run_.phase.name = "ps";
    run_.phase.switched_at_step = switcher->outcome()->switch_step;
  }
  return absl::OkStatus();
}

void RunSupervisor::SleepUntilNextPass(Clock::time_point now) const {
  Clock::time_point next = training_end_ ? now + options_.tick : next_tick_;
  for (const Controller* c :
       {static_cast<const Controller*>(&run_.eval), static_cast<const Controller*>(run_.switcher),
        static_cast<const Controller*>(run_.recovery)}) {
    if (c == nullptr) continue;
    if (auto within = c->StepWithin()) next = std::min(next, now + *within);
  }
  // The only wait of the run: until the next tick or the controller that needs a pass sooner.
  if (next > Clock::now()) std::this_thread::sleep_until(next);
}

}  // namespace strata
