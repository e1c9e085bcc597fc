#include "services/worker/push_pull_sync.h"

#include <chrono>
#include <cstring>
#include <future>

#include "services/common/base/status.h"
#include "services/worker/partition_clients.h"
#include "services/worker/worker_metrics.h"

namespace strata {
namespace {

class PushPullSynchroniser final : public Synchroniser {
 public:
  PushPullSynchroniser(PushPullOptions options, std::unique_ptr<PartitionClients> clients)
      : options_(std::move(options)),
        clients_(std::move(clients)),
        buffers_(clients_->buffer_floats()) {
    if (options_.pipeline) {
      gradients_out_.resize(clients_->parameter_floats());
      buffers_out_.resize(clients_->buffer_floats());
      parameters_in_.resize(clients_->parameter_floats());
      buffers_in_.resize(clients_->buffer_floats());
    }
  }

  std::string name() const override {
    return options_.pipeline ? "push-pull (pipelined)" : "push-pull";
  }
  std::vector<std::string> ServerLinks() const override { return clients_->LinkPaths(); }
  uint64_t ServerLinksStamp() const override { return clients_->LinkPathStamp(); }

  absl::Status Start(Trainer& trainer) override {
    STRATA_RETURN_IF_ERROR(clients_->ForEachServer([&](ServerLink& s) {
      return clients_->PullInto(s, steps_, trainer.parameter_data(), buffers_.data());
    }));
    trainer.SetBuffersFrom(buffers_.data());
    clients_->MarkInstalled();
    return absl::OkStatus();
  }

  absl::StatusOr<StepOutcome> Step(Trainer& trainer, const StepContext& context) override {
    ++steps_;
    // Push/pull workers do not move in lockstep: a vote concerns this worker alone.
    StepOutcome outcome;
    outcome.all_ready_to_switch = context.ready_to_switch;
    const PushFields fields{context.step, context.batch_examples, options_.lr};
    if (!options_.pipeline) {
      trainer.CopyBuffersTo(buffers_.data());
      const ExchangeBuffers x{trainer.gradient_data(), buffers_.data(), trainer.parameter_data(),
                              buffers_.data()};
      STRATA_RETURN_IF_ERROR(Exchange(fields, x));
      trainer.SetBuffersFrom(buffers_.data());
      clients_->MarkInstalled();
      clients_->ReadBudget(&outcome.has_budget, &outcome.budget_spent);
      return outcome;
    }
    // The previous step's exchange has been travelling while this step computed; its model is
    // the one the next step computes on, so this step's gradients reach the servers one version
    // later than without the pipeline (the staleness it adds, at most one).
    STRATA_RETURN_IF_ERROR(Drain(trainer));
    // Before the next exchange starts writing the links.
    clients_->ReadBudget(&outcome.has_budget, &outcome.budget_spent);
    if (outcome.budget_spent) return outcome;  // the servers would discard this step's push
    std::memcpy(gradients_out_.data(), trainer.gradient_data(),
                gradients_out_.size() * sizeof(float));
    trainer.CopyBuffersTo(buffers_out_.data());
    const ExchangeBuffers x{gradients_out_.data(), buffers_out_.data(), parameters_in_.data(),
                            buffers_in_.data()};
    in_flight_ = std::async(std::launch::async, [this, x, fields] { return Exchange(fields, x); });
    return outcome;
  }

  // Waits for the exchange in flight (pipelined) and gives the trainer its model.
  absl::Status Drain(Trainer& trainer) override {
    if (!in_flight_.valid()) return absl::OkStatus();
    STRATA_RETURN_IF_ERROR(in_flight_.get());
    std::memcpy(trainer.parameter_data(), parameters_in_.data(),
                parameters_in_.size() * sizeof(float));
    trainer.SetBuffersFrom(buffers_in_.data());
    clients_->MarkInstalled();
    return absl::OkStatus();
  }

 private:
  // One push/pull with every server, counted in the worker's metrics when it succeeds.
  absl::Status Exchange(const PushFields& fields, const ExchangeBuffers& x) {
    const auto began = std::chrono::steady_clock::now();
    STRATA_RETURN_IF_ERROR(
        clients_->ForEachServer([&](ServerLink& s) { return clients_->Exchange(s, fields, x); }));
    if (options_.metrics != nullptr) {
      // Gradients and buffers go out; parameters and buffers come back.
      const auto [pushed, pulled] = clients_->LastExchangeBytes();
      options_.metrics->PushPull(
          static_cast<double>(pushed), static_cast<double>(pulled),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
    }
    return absl::OkStatus();
  }

  const PushPullOptions options_;
  const std::unique_ptr<PartitionClients> clients_;
  std::vector<float> buffers_;
  // Pipelined only: the step's values while they travel, and the reply until it is installed.
  std::vector<float> gradients_out_, buffers_out_, parameters_in_, buffers_in_;
  int64_t steps_ = 0;
  // Last, so that it is destroyed first: its destructor waits for the exchange, which uses the
  // members above.
  std::future<absl::Status> in_flight_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Synchroniser>> MakePushPullSynchroniser(
    const PushPullOptions& options, const Trainer& trainer) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<PartitionClients> clients,
                          PartitionClients::Create(options.clients, trainer));
  return std::unique_ptr<Synchroniser>(new PushPullSynchroniser(options, std::move(clients)));
}

}  // namespace strata
