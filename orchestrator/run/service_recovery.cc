#include "orchestrator/run/service_recovery.h"

#include <algorithm>
#include <cstdint>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>

#include "services/common/base/status.h"

namespace strata {
namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

int ServiceIndex(const std::string& name) {
  int index = -1;
  const size_t dash = name.rfind('-');
  if (dash == std::string::npos || !absl::SimpleAtoi(name.substr(dash + 1), &index)) return -1;
  return index;
}

bool ServiceRecovery::may_restart(const std::string& service) const {
  auto it = restarts_.find(service);
  return options_.max_restarts > 0 &&
         (it == restarts_.end() || it->second < options_.max_restarts);
}

ServiceRecovery::ServiceRecovery(RecoveryOptions options, Launcher& launcher,
                                 ClusterClient& client, RunRecord& record, RunFailure& failure)
    : options_(std::move(options)),
      launcher_(launcher),
      client_(client),
      record_(record),
      failure_(failure) {}

absl::Status ServiceRecovery::OnExit(const ServiceExit& exit, const ClusterView& view,
                                     RecoveryWindow window, Clock::time_point now) {
  const std::string& name = exit.service;
  const int index = ServiceIndex(name);
  // Why this exit cannot be survived, if it cannot; empty if a restart is worth trying.
  std::string why_not;
  if (options_.max_restarts == 0) {
    why_not = "recovery.restarts is 0";
  } else if (exit.role == ServiceRole::kEvaluator || index < 0) {
    why_not = "only workers and parameter servers are restarted";
  } else if (window.switching) {
    why_not = "a switch was under way, and it needs every process it began with";
  } else if (exit.role == ServiceRole::kWorker && !window.asynchronous && !window.ring_reformable) {
    why_not = "the workers were in the ring all-reduce, which needs every worker";
  } else if (exit.role == ServiceRole::kWorker && window.ring_reformable &&
             std::any_of(pending_.begin(), pending_.end(),
                         [](const auto& entry) { return entry.second.reform; })) {
    why_not = "the ring was still re-forming after the death of another worker";
  } else if (exit.role == ServiceRole::kWorker && window.ring_reformable &&
             std::any_of(view.workers.begin(), view.workers.end(),
                         [](const v1::WorkerStatus& w) { return w.finished(); })) {
    why_not = "the other workers had finished training";
  } else if (exit.role == ServiceRole::kWorker &&
             static_cast<size_t>(index) < view.workers.size() && view.workers[index].finished()) {
    why_not = "it had finished training";
  } else if (restarts_[name] >= options_.max_restarts) {
    why_not = absl::StrCat("it was restarted ", restarts_[name],
                           " time(s) already (recovery.restarts)");
  }
  if (!why_not.empty()) {
    return failure_.Fail(name, absl::Status(exit.failure.code(),
                                            absl::StrCat(exit.failure.message(),
                                                         "; not restarted: ", why_not)));
  }
  const int attempt = ++restarts_[name];
  ++restarts_total_;
  Pending p;
  p.role = exit.role;
  p.index = index;
  p.began = now;
  if (exit.role == ServiceRole::kWorker && static_cast<size_t>(index) < view.workers.size()) {
    p.first_step = view.workers[index].step();
  }
  p.reform = exit.role == ServiceRole::kWorker && window.ring_reformable;
  if (auto it = server_versions_.find(index);
      exit.role == ServiceRole::kParameterServer && it != server_versions_.end()) {
    p.last_version = it->second;
  }
  record_.Event(RunEvent::kRestart, {{"process", name},
                                     {"reason", exit.how},
                                     {"restart", attempt},
                                     {"of", options_.max_restarts}});
  if (absl::Status s = launcher_.Restart(name); !s.ok()) {
    return failure_.Fail(name, absl::Status(exit.failure.code(),
                                            absl::StrCat(exit.failure.message(),
                                                         "; the restart failed: ", s.message())));
  }
  pending_[name] = p;
  if (p.reform) InterruptRing(index, name);
  return absl::OkStatus();
}

void ServiceRecovery::InterruptRing(int lost, const std::string& name) {
  v1::ReformRingRequest interrupt;
  interrupt.set_lost_peer(name);
  for (int r = 0; r < client_.worker_count(); ++r) {
    // Best effort: a survivor that misses it gives up at its ring deadline instead.
    if (r != lost) (void)client_.ReformRing(r, interrupt, options_.rpc_timeout);
  }
}

absl::Status ServiceRecovery::Step(const ClusterView& view, Clock::time_point now) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    const std::string& name = it->first;
    const Pending& p = it->second;
    bool done = false;
    if (launcher_.Listening(name)) {
      absl::Status s = p.reform                         ? StepRing(name, it->second, view, &done)
                       : p.role == ServiceRole::kWorker ? StepWorker(name, p, &done)
                                                        : StepServer(name, p, now, &done);
      if (!s.ok()) return failure_.Fail(name, s);
    }
    if (!done && now - p.began > options_.rejoin_timeout) {
      return failure_.Fail(
          name, absl::DeadlineExceededError(absl::StrCat(
                    name, " was restarted but did not ",
                    p.role == ServiceRole::kWorker ? "rejoin" : "serve again", " within ",
                    options_.rejoin_timeout.count() / 1000, " s; see logs/", name, ".log")));
    }
    if (done) {
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  return absl::OkStatus();
}

absl::Status ServiceRecovery::StepWorker(const std::string& name, const Pending& p, bool* done) {
  v1::StartRequest start = options_.ps_start;
  start.set_first_step(p.first_step);
  absl::Status s = client_.StartWorker(p.index, start, options_.rpc_timeout);
  // Listening, but its server may not take calls yet: try again on the next pass.
  if (s.code() == absl::StatusCode::kUnavailable) return absl::OkStatus();
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(name, " restarted, but ", s.message()));
  record_.Event(RunEvent::kRejoined,
                {{"process", name}, {"first_step", p.first_step}});
  *done = true;
  return absl::OkStatus();
}

absl::Status ServiceRecovery::StepRing(const std::string& name, Pending& p, const ClusterView& view,
                                       bool* done) {
  // Every survivor must have given up the broken ring (its status says ring_broken), so that the
  // steps it reports are final.
  int source = -1;
  int64_t low = INT64_MAX, high = -1;
  for (int r = 0; r < static_cast<int>(view.workers.size()); ++r) {
    if (r == p.index) continue;
    const v1::WorkerStatus& w = view.workers[r];
    if (w.ring_broken().empty() || w.ring_generation() != ring_generation_) {
      return absl::OkStatus();  // not yet: look again on the next pass
    }
    low = std::min(low, w.step());
    if (w.step() > high) {
      high = w.step();
      source = r;
    }
  }
  if (source < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " died and no other worker is left to re-form the ring with"));
  }
  if (high - low > 1) {
    return absl::InternalError(absl::StrCat(
        "the ring broke with survivors ", high - low, " steps apart (", low, " and ", high,
        "); a ring keeps its members within one step, so it cannot be re-formed"));
  }
  const uint32_t generation = ring_generation_ + 1;
  if (!p.started) {
    v1::StartRequest start = options_.ring_start;
    start.set_first_step(high);
    start.set_ring_generation(generation);
    start.set_ring_source_rank(source);
    absl::Status s = client_.StartWorker(p.index, start, options_.rpc_timeout);
    // Listening, but its server may not take calls yet: try again on the next pass.
    if (s.code() == absl::StatusCode::kUnavailable) return absl::OkStatus();
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(name, " restarted, but ", s.message()));
    p.started = true;
  }
  v1::ReformRingRequest reform;
  reform.mutable_workers()->CopyFrom(options_.ring_start.workers());
  reform.set_source_rank(source);
  reform.set_step(high);
  reform.set_generation(generation);
  for (int r = 0; r < static_cast<int>(view.workers.size()); ++r) {
    if (r == p.index) continue;
    STRATA_RETURN_IF_ERROR(client_.ReformRing(r, reform, options_.rpc_timeout));
  }
  ring_generation_ = generation;
  record_.Event(RunEvent::kRejoined, {{"process", name},
                                      {"first_step", high},
                                      {"ring_generation", generation},
                                      {"model_from", absl::StrCat("worker-", source)}});
  *done = true;
  return absl::OkStatus();
}

absl::Status ServiceRecovery::StepServer(const std::string& name, const Pending& p,
                                         Clock::time_point now, bool* done) {
  auto status = client_.GetServerStatus(p.index, options_.rpc_timeout);
  if (!status.ok()) return absl::OkStatus();  // not answering yet
  nlohmann::json event = {{"process", name},
                          {"resumed_version", status->version()},
                          {"loaded", status->loaded()},
                          {"after_s", Seconds(now - p.began)}};
  if (p.last_version >= 0) {
    // A lower bound: updates applied after the last status this process read are lost as well.
    event["last_version_seen"] = p.last_version;
    event["updates_lost"] = std::max<int64_t>(0, p.last_version - status->version());
  }
  record_.Event(RunEvent::kRejoined, event);
  server_versions_[p.index] = status->version();
  *done = true;
  return absl::OkStatus();
}

std::optional<Clock::duration> ServiceRecovery::StepWithin() const {
  if (pending_.empty()) return std::nullopt;
  return std::chrono::milliseconds(20);  // a new process listens within a second or two
}

void ServiceRecovery::ObserveServer(int partition, const v1::ServerStatus& status) {
  server_versions_[partition] = status.version();
}

}  // namespace strata
