#include "orchestrator/run/eval_scheduler.h"

#include <cmath>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include "services/common/base/status.h"

namespace strata {

EvalScheduler::EvalScheduler(EvalSchedulerOptions options, ClusterClient& client, RunRecord& record,
                             RunConsole& console, const RunPhase& phase)
    : options_(std::move(options)),
      client_(client),
      record_(record),
      console_(console),
      phase_(phase),
      last_evaluated_epoch_(options_.evaluated_epochs) {}

absl::Status EvalScheduler::Step(const ClusterView& view, Clock::time_point now) {
  STRATA_RETURN_IF_ERROR(Collect(view));
  if (pending_) return absl::OkStatus();
  const int64_t epoch = view.GlobalEpoch();
  if (epoch > last_evaluated_epoch_ && epoch < options_.epochs) Start(epoch, view, now);
  return absl::OkStatus();
}

absl::Status EvalScheduler::StepFinal(const ClusterView& view, Clock::time_point now) {
  STRATA_RETURN_IF_ERROR(Collect(view));
  if (pending_ || final_started_) return absl::OkStatus();
  final_started_ = true;
  if (last_evaluated_epoch_ < options_.epochs || !have_final_) Start(options_.epochs, view, now);
  return absl::OkStatus();
}

std::optional<Clock::duration> EvalScheduler::StepWithin() const {
  // The run only waits for the final evaluation; collect it promptly.
  if (final_started_ && pending_) return std::chrono::milliseconds(20);
  return std::nullopt;
}

void EvalScheduler::Start(int64_t epoch, const ClusterView& view, Clock::time_point now) {
  // The phase is the one the evaluated epoch was trained in; the model is where it lives now.
  std::string phase = phase_.name;
  if (phase_.switched_at_step && epoch * view.StepsPerEpoch() <= *phase_.switched_at_step)
    phase = "allreduce";
  v1::EvaluateModelRequest request;
  request.set_epoch(epoch);
  request.set_phase(phase);
  if (phase_.name == "ps") {
    for (const std::string& a : options_.server_addresses) request.add_parameter_servers(a);
  } else {
    request.set_worker(options_.worker_address);
  }
  request.set_train_loss(view.TrainLossOf(epoch));
  request.set_wall_s(std::chrono::duration<double>(now - options_.run_start).count());
  pending_worker_rates_ = WorkerSamplesPerSecondSince(
      view, rate_steps_,
      rate_time_ ? std::chrono::duration<double>(now - *rate_time_).count() : 0.0);
  rate_steps_.clear();
  for (const v1::WorkerStatus& w : view.workers) rate_steps_.push_back(w.step());
  rate_time_ = now;
  last_evaluated_epoch_ = epoch;
  pending_epoch_ = epoch;
  pending_ = client_.BeginEvaluate(request, options_.timeout);
}

absl::Status EvalScheduler::Collect(const ClusterView& view) {
  if (!pending_ || !pending_->done()) return absl::OkStatus();
  std::unique_ptr<PendingReply<v1::EvalMetrics>> eval = std::move(pending_);
  if (!eval->result().ok()) {
    const absl::Status& s = eval->result().status();
    record_.Event(RunEvent::kEvaluationFailed,
                  {{"epoch", pending_epoch_}, {"error", std::string(s.message())}});
    console_.Say(absl::StrCat("evaluation of epoch ", pending_epoch_, " failed: ", s.message()));
    return absl::OkStatus();
  }
  const v1::EvalMetrics& m = *eval->result();
  using nlohmann::json;
  json line = {{"epoch", m.epoch()},
               {"phase", m.phase()},
               {"val_loss", m.val_loss()},
               {"val_acc", m.val_acc()},
               {"train_loss", std::isfinite(m.train_loss()) ? json(m.train_loss()) : json(nullptr)},
               {"wall_s", m.wall_s()},
               {"samples_per_s", view.SamplesPerSecond()},
               {"worker_samples_per_s", pending_worker_rates_},
               {"eval_s", m.eval_s()},
               {"source", m.source()}};
  if (options_.regression) line["val_rmse"] = m.val_rmse();
  STRATA_RETURN_IF_ERROR(record_.Metrics(line));
  final_ = m;
  have_final_ = m.epoch() >= options_.epochs;
  last_metrics_ = m;
  console_.Say(absl::StrFormat(
      "epoch %3d/%d  %-9s  val_loss %.4f  %s %.4f  train_loss %s  %6.0f samples/s  %6.1f s",
      m.epoch(), options_.epochs, m.phase(), m.val_loss(),
      options_.regression ? "val_rmse" : "val_acc",
      options_.regression ? m.val_rmse() : m.val_acc(),
      std::isfinite(m.train_loss()) ? absl::StrFormat("%.4f", m.train_loss()) : "--",
      view.SamplesPerSecond(), m.wall_s()));
  if (options_.on_result) options_.on_result(m);
  return absl::OkStatus();
}

}  // namespace strata
