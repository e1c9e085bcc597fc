#include "services/worker/point_round_sync.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>

#include "services/common/base/status.h"
#include "services/common/wire/rpc.h"
#include "strata/v1/parameter_server.grpc.pb.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

// The points accumulated toward one round, and where they came from.
struct RoundAccumulator {
  int64_t round = 1;
  std::vector<float> sum;      // sum over the round's batches of points x mean gradient
  std::vector<float> buffers;  // the buffer values after the round's last batch
  int64_t points = 0, dropped = 0;
  double loss_sum = 0;
  // The oldest model version the points were computed on; kNone before the first point.
  static constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  int64_t oldest_version = kNone;
  int next_mark = 1;  // the next count report: at next_mark / 4 of K*/P
  Clock::time_point started;

  void Restart(int64_t next_round) {
    round = next_round;
    std::fill(sum.begin(), sum.end(), 0.0f);
    points = dropped = 0;
    loss_sum = 0;
    oldest_version = kNone;
    next_mark = 1;
    started = Clock::now();
  }
  double Seconds() const { return std::chrono::duration<double>(Clock::now() - started).count(); }
};

class PointRoundSynchroniser final : public Synchroniser {
 public:
  PointRoundSynchroniser(PointRoundOptions options, std::unique_ptr<PartitionClients> clients)
      : options_(std::move(options)),
        clients_(std::move(clients)),
        coordinator_(v1::PullCoordinator::NewStub(MakeChannel(options_.clients.servers[0]))),
        buffers_(clients_->buffer_floats()),
        fetched_parameters_(clients_->parameter_floats()),
        fetched_buffers_(clients_->buffer_floats()),
        outgoing_(clients_->parameter_floats()) {
    round_.sum.assign(clients_->parameter_floats(), 0.0f);
    round_.buffers.assign(clients_->buffer_floats(), 0.0f);
  }

  ~PointRoundSynchroniser() override { StopNotices(); }

  std::string name() const override { return options_.asynchronous ? "apdp" : "pdp"; }
  std::vector<std::string> ServerLinks() const override { return clients_->LinkPaths(); }
  uint64_t ServerLinksStamp() const override { return clients_->LinkPathStamp(); }

  // May be called again while the servers are still loading a handed-over model (the worker
  // retries): the subscription is made once, after the first model is in.
  absl::Status Start(Trainer& trainer) override {
    STRATA_RETURN_IF_ERROR(clients_->ForEachServer([&](ServerLink& s) {
      return clients_->PullInto(s, 0, trainer.parameter_data(), buffers_.data());
    }));
    trainer.SetBuffersFrom(buffers_.data());
    {
      std::lock_guard<std::mutex> lock(mu_);
      installed_version_ = clients_->servers()[0].version;
    }
    if (!notices_thread_.joinable()) STRATA_RETURN_IF_ERROR(Subscribe());
    return absl::OkStatus();
  }

  absl::StatusOr<StepOutcome> Step(Trainer& trainer, const StepContext& context) override {
    StepOutcome outcome;
    outcome.all_ready_to_switch = context.ready_to_switch;
    outcome.has_budget = true;  // rounds end when the job's points are processed
    std::optional<v1::CountReport> report;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!answer_error_.ok()) return answer_error_;
      // The batch was computed on the installed model. A pull request may have taken the round
      // it was meant for while it computed: it joins the next one, if that keeps its version gap
      // within the mode's bound (PDP 0, APDP 1), else it is dropped.
      const int64_t applied_to = first_round_version_ + (round_.round - first_round_);
      if (applied_to - installed_version_ <= MaxGap()) {
        const float weight = static_cast<float>(context.batch_examples);
        const float* g = trainer.gradient_data();
        for (size_t i = 0; i < round_.sum.size(); ++i) round_.sum[i] += weight * g[i];
        round_.points += context.batch_examples;
        round_.loss_sum += context.loss * static_cast<double>(context.batch_examples);
        round_.oldest_version = std::min(round_.oldest_version, installed_version_);
        trainer.CopyBuffersTo(round_.buffers.data());
      } else {
        round_.dropped += context.batch_examples;
        dropped_total_ += context.batch_examples;
      }
      report = DueReport();
      // PDP pauses until the model of the round it answered is in; APDP takes it when it is.
      if (!options_.asynchronous) {
        const int64_t model_due = first_round_version_ + (round_.round - first_round_);
        cv_.wait(lock, [&] {
          return installed_version_ >= model_due || fetched_version_ >= model_due || ended_ ||
                 !answer_error_.ok() || stopping_notices_;
        });
        if (!answer_error_.ok()) return answer_error_;
      }
      if (fetched_version_ > installed_version_) InstallFetched(trainer);
      outcome.budget_spent = ended_ || budget_spent_;
    }
    if (report) {
      // The coordinator copes without it (it extrapolates from the previous rate).
      const absl::Status sent = SendReport(*report);
      if (!sent.ok()) spdlog::warn("count report not taken: {}", sent.ToString());
    }
    return outcome;
  }

  absl::Status Drain(Trainer& trainer) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !answering_; });
    if (fetched_version_ > installed_version_) InstallFetched(trainer);
    if (dropped_total_ > 0) {
      spdlog::info("{}: {} points dropped, computed on a model older than their round allows",
                   name(), dropped_total_);
    }
    return answer_error_;
  }

 private:
  int64_t MaxGap() const { return options_.asynchronous ? 1 : 0; }

  // Opens the notice stream, waits for the coordinator's announcement of K*, and answers every
  // pull request from then on on the notice thread, so that an answer leaves at once whatever
  // batch the training thread is in (with mini-batches the unit of work, waiting for the batch
  // in hand would cost a straggler's whole batch time on every round).
  absl::Status Subscribe() {
    auto context = std::make_unique<grpc::ClientContext>();
    v1::RoundsRequest request;
    request.set_worker(options_.clients.rank);
    auto reader = coordinator_->Rounds(context.get(), request);
    {
      std::lock_guard<std::mutex> lock(mu_);
      notices_context_ = std::move(context);
    }
    notices_thread_ = std::thread([this, reader = std::move(reader)]() mutable {
      v1::RoundNotice notice;
      while (reader->Read(&notice)) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (notice.k_star() > 0) k_star_ = notice.k_star();
          if (notice.round() == 0) {
            // The round being accumulated is applied to the model Start pulled; each later
            // round to the version after. Set here, before any pull request is answered.
            first_round_ = std::max<int64_t>(1, notice.current_round());
            first_round_version_ = installed_version_;
            round_.Restart(first_round_);
            announced_ = true;
          }
          ended_ = ended_ || notice.end();
          cv_.notify_all();
          if (notice.end() || stopping_notices_) break;
        }
        if (notice.round() > 0) Answer(notice.round());
      }
      const grpc::Status finished = reader->Finish();
      std::lock_guard<std::mutex> lock(mu_);
      if (!ended_ && !stopping_notices_ && answer_error_.ok()) {
        answer_error_ =
            Annotate(finished.ok() ? absl::UnavailableError("the pull coordinator ended the rounds")
                                   : FromGrpcStatus(finished, "the notice stream"),
                     CoordinatorName());
      }
      cv_.notify_all();
    });
    std::unique_lock<std::mutex> lock(mu_);
    const bool announced = cv_.wait_for(lock, options_.clients.deadline, [&] {
      return announced_ || ended_ || !answer_error_.ok();
    });
    if (!answer_error_.ok()) return answer_error_;
    if (!announced) {
      return absl::DeadlineExceededError(absl::StrCat("no K* announcement within ",
                                                      options_.clients.deadline.count() / 1000,
                                                      " s from ", CoordinatorName()));
    }
    return absl::OkStatus();
  }

  void StopNotices() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_notices_ = true;
      if (notices_context_) notices_context_->TryCancel();
      cv_.notify_all();
    }
    if (notices_thread_.joinable()) notices_thread_.join();
  }

  std::string CoordinatorName() const {
    return absl::StrCat("the pull coordinator (parameter server 0, ", options_.clients.servers[0],
                        ")");
  }

  // With mu_ held: the count report due after the last batch (at 1/4, 1/2 and 3/4 of this
  // worker's share K*/P, each once per round).
  std::optional<v1::CountReport> DueReport() {
    const double share = static_cast<double>(k_star_) / options_.workers;
    bool due = false;
    while (round_.next_mark <= 3 &&
           static_cast<double>(round_.points) >= share * round_.next_mark / 4.0) {
      ++round_.next_mark;
      due = true;
    }
    if (!due) return std::nullopt;
    v1::CountReport report;
    report.set_round(round_.round);
    report.set_points(round_.points);
    report.set_seconds(round_.Seconds());
    return report;
  }

  absl::Status SendReport(v1::CountReport report) {
    report.set_worker(options_.clients.rank);
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(options_.clients.deadline));
    v1::CountReply reply;
    const grpc::Status s = coordinator_->Report(&context, report, &reply);
    if (!s.ok()) return FromGrpcStatus(s, absl::StrCat("report to ", CoordinatorName()));
    std::lock_guard<std::mutex> lock(mu_);
    if (reply.k_star() > 0) k_star_ = reply.k_star();
    return absl::OkStatus();
  }

  // On the notice thread: the coordinator asks for round `round`'s update. Takes what the round
  // holds (the batch in hand joins the next round), pushes its mean gradient to every partition,
  // reports it, and fetches the model the round makes.
  void Answer(int64_t round) {
    v1::CountReport update;
    PushFields fields;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (round != round_.round) {
        spdlog::warn("pull request for round {} while accumulating round {}; ignored", round,
                     round_.round);
        return;
      }
      answering_ = true;
      std::swap(outgoing_, round_.sum);
      outgoing_buffers_ = round_.buffers;
      const int64_t points = round_.points;
      if (points > 0) {
        const float inv = 1.0f / static_cast<float>(points);
        for (float& v : outgoing_) v *= inv;
      }
      fields.clock = round;
      fields.samples = points;
      fields.version =
          points > 0 ? round_.oldest_version : std::max<int64_t>(0, installed_version_);
      update.set_round(round);
      update.set_points(points);
      update.set_seconds(round_.Seconds());
      update.set_update(true);
      update.set_loss(points > 0 ? round_.loss_sum / static_cast<double>(points) : 0.0);
      update.set_version_used(fields.version);
      update.set_dropped(round_.dropped);
      round_.sum.resize(outgoing_.size());
      round_.Restart(round + 1);
    }
    absl::Status done = clients_->ForEachServer([&](ServerLink& s) {
      return clients_->PushTo(s, fields, outgoing_.data(), outgoing_buffers_.data());
    });
    if (done.ok()) {
      // The push's reply is the version that will hold the round: it is applied to the one
      // before.
      const int64_t applied_to = clients_->servers()[0].pushed_version - 1;
      // An update without points holds no contribution to be stale.
      update.set_version_gap(fields.samples > 0 ? std::max<int64_t>(0, applied_to - fields.version)
                                                : 0);
      done = SendReport(update);
    }
    if (done.ok()) {
      done = clients_->ForEachServer([&](ServerLink& s) {
        return clients_->PullInto(s, round, incoming_parameters_.data(), incoming_buffers_.data());
      });
    }
    std::lock_guard<std::mutex> lock(mu_);
    answering_ = false;
    if (!done.ok()) {
      if (answer_error_.ok() && !stopping_notices_) answer_error_ = done;
    } else {
      std::swap(fetched_parameters_, incoming_parameters_);
      std::swap(fetched_buffers_, incoming_buffers_);
      fetched_version_ = clients_->servers()[0].version;
      bool has_budget = false, spent = false;
      clients_->ReadBudget(&has_budget, &spent);
      budget_spent_ = budget_spent_ || spent;
    }
    cv_.notify_all();
  }

  // With mu_ held, on the training thread.
  void InstallFetched(Trainer& trainer) {
    std::memcpy(trainer.parameter_data(), fetched_parameters_.data(),
                fetched_parameters_.size() * sizeof(float));
    trainer.SetBuffersFrom(fetched_buffers_.data());
    installed_version_ = fetched_version_;
  }

  const PointRoundOptions options_;
  const std::unique_ptr<PartitionClients> clients_;
  const std::unique_ptr<v1::PullCoordinator::Stub> coordinator_;
  std::vector<float> buffers_;  // Start's pull

  // Everything below is guarded by mu_ unless it says otherwise.
  std::mutex mu_;
  std::condition_variable cv_;
  RoundAccumulator round_;
  int64_t first_round_ = 1, first_round_version_ = 0;
  int64_t installed_version_ = 0;  // the model the training thread computes on
  int64_t dropped_total_ = 0;
  // The latest model an answer fetched, until the training thread installs it.
  std::vector<float> fetched_parameters_, fetched_buffers_;
  int64_t fetched_version_ = -1;
  bool budget_spent_ = false;
  // The notice thread's own: the update on its way out, the model on its way in.
  std::vector<float> outgoing_, outgoing_buffers_;
  std::vector<float> incoming_parameters_ = std::vector<float>(fetched_parameters_.size());
  std::vector<float> incoming_buffers_ = std::vector<float>(fetched_buffers_.size());
  bool answering_ = false;
  absl::Status answer_error_;
  std::unique_ptr<grpc::ClientContext> notices_context_;
  int64_t k_star_ = 0;
  bool announced_ = false, ended_ = false, stopping_notices_ = false;
  std::thread notices_thread_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Synchroniser>> MakePointRoundSynchroniser(
    const PointRoundOptions& options, const Trainer& trainer) {
  if (options.workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("workers ", options.workers, " < 1"));
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<PartitionClients> clients,
                          PartitionClients::Create(options.clients, trainer));
  return std::unique_ptr<Synchroniser>(new PointRoundSynchroniser(options, std::move(clients)));
}

}  // namespace strata
