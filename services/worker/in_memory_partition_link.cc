#include "services/worker/in_memory_partition_link.h"

#include <condition_variable>
#include <mutex>

#include <absl/strings/str_cat.h>

#include "services/common/base/status.h"
#include "services/parameter_server/partition_store.h"
#include "services/parameter_server/push_staging.h"
#include "services/worker/partition_block.h"

namespace strata {

struct InMemoryPartitionServers::State {
  std::mutex mu;
  std::condition_variable refused_cv;
  std::vector<PartitionStore*> stores;  // null: stopped
  std::vector<int64_t> refused;         // calls refused since the server stopped
};

namespace {

class InMemoryPartitionLink final : public PartitionLink {
 public:
  std::string Path() const override { return "in memory"; }
  InMemoryPartitionLink(std::shared_ptr<InMemoryPartitionServers::State> state,
                        PartitionLinkOptions options)
      : state_(std::move(state)), options_(std::move(options)), block_(options_.tensors) {}

  absl::StatusOr<PartitionReply> Exchange(const PushFields& fields, const ExchangeBuffers& x,
                                          const PartitionCallOptions& call) override {
    const std::string what = options_.Describe("push/pull with");
    STRATA_ASSIGN_OR_RETURN(PartitionStore * store, Store(what));
    const WaitOptions wait = WaitFor(call);
    absl::StatusOr<int64_t> version = PushTo(*store, fields, x.gradients, x.buffers_out, wait);
    if (!version.ok()) return Refused(*store, version.status(), what);
    return PullFrom(*store, *version, x.parameters_in, x.buffers_in, wait, what);
  }

  absl::StatusOr<PartitionReply> Pull(int64_t clock, float* parameters, float* buffers,
                                      const PartitionCallOptions& call) override {
    const std::string what = options_.Describe("pull from");
    STRATA_ASSIGN_OR_RETURN(PartitionStore * store, Store(what));
    return PullFrom(*store, 0, parameters, buffers, WaitFor(call), what);
  }

  absl::StatusOr<int64_t> Push(const PushFields& fields, const float* gradients,
                               const float* buffers, const PartitionCallOptions& call) override {
    const std::string what = options_.Describe("push to");
    STRATA_ASSIGN_OR_RETURN(PartitionStore * store, Store(what));
    absl::StatusOr<int64_t> version = PushTo(*store, fields, gradients, buffers, WaitFor(call));
    if (!version.ok()) return Refused(*store, version.status(), what);
    return version;
  }

 private:
  absl::StatusOr<PartitionStore*> Store(const std::string& what) {
    std::lock_guard<std::mutex> lock(state_->mu);
    const auto p = static_cast<size_t>(options_.partition);
    if (p >= state_->stores.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": no such in-memory server (", state_->stores.size(), " of them)"));
    }
    if (state_->stores[p] == nullptr) {
      ++state_->refused[p];
      state_->refused_cv.notify_all();
      return Annotate(absl::UnavailableError("the server is stopped"), what);
    }
    return state_->stores[p];
  }

  static WaitOptions WaitFor(const PartitionCallOptions& call) {
    WaitOptions wait;
    wait.deadline = std::chrono::system_clock::now() + call.deadline;
    return wait;
  }

  // The data plane's refusal of a layout that is not the server's (tcp_push_pull_server.cc).
  absl::Status CheckLayout(const PartitionLayout& layout) const {
    if (layout.fingerprint == block_.fingerprint()) return absl::OkStatus();
    return absl::FailedPreconditionError(
        "the worker's partition of the model differs from this server's (other tensor names, "
        "shapes or partition plan): the server holds a different model");
  }

  // A bad request counts as rejected on the server, as the services count it.
  static absl::Status Refused(PartitionStore& store, const absl::Status& why,
                              const std::string& what) {
    if (why.code() == absl::StatusCode::kInvalidArgument) store.CountRejected();
    return Annotate(why, what);
  }

  absl::StatusOr<int64_t> PushTo(PartitionStore& store, const PushFields& fields,
                                 const float* gradients, const float* buffers,
                                 const WaitOptions& wait) {
    STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const PartitionLayout> layout, store.CurrentLayout());
    STRATA_RETURN_IF_ERROR(CheckLayout(*layout));
    const PushMeta meta{options_.rank, fields.version, fields.clock, fields.samples, fields.lr};
    STRATA_RETURN_IF_ERROR(CheckPushMeta(meta, store.config().workers));
    if (staging_ == nullptr || &staging_->layout() != layout.get()) {
      staging_ = std::make_unique<PushStaging>(layout);
    }
    block_.Gather(gradients, buffers, staging_->WholeDestination());
    STRATA_RETURN_IF_ERROR(
        Annotate(staging_->Validate(), absl::StrCat("push from worker ", options_.rank)));
    return store.Push(meta, *staging_, wait);
  }

  absl::StatusOr<PartitionReply> PullFrom(PartitionStore& store, int64_t min_version,
                                          float* parameters, float* buffers,
                                          const WaitOptions& wait, const std::string& what) {
    absl::StatusOr<PullSnapshot> snapshot = store.Pull(options_.rank, min_version, wait);
    if (!snapshot.ok()) return Annotate(snapshot.status(), what);
    STRATA_RETURN_IF_ERROR(Annotate(CheckLayout(*snapshot->layout), what));
    block_.Scatter(snapshot->values->data(), parameters, buffers);
    return PartitionReply{snapshot->version, snapshot->samples, snapshot->sample_budget};
  }

  const std::shared_ptr<InMemoryPartitionServers::State> state_;
  const PartitionLinkOptions options_;
  const PartitionBlock block_;
  // Reused from push to push while the layout stays, as the data plane's session does.
  std::unique_ptr<PushStaging> staging_;
};

}  // namespace

InMemoryPartitionServers::InMemoryPartitionServers(std::vector<PartitionStore*> stores)
    : state_(std::make_shared<State>()) {
  state_->stores = std::move(stores);
  state_->refused.assign(state_->stores.size(), 0);
}

PartitionLinkFactory InMemoryPartitionServers::LinkFactory() const {
  return
      [state = state_](
          const PartitionLinkOptions& options) -> absl::StatusOr<std::unique_ptr<PartitionLink>> {
        return std::make_unique<InMemoryPartitionLink>(state, options);
      };
}

void InMemoryPartitionServers::Stop(int partition) { Serve(partition, nullptr); }

void InMemoryPartitionServers::Serve(int partition, PartitionStore* store) {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (partition < 0 || static_cast<size_t>(partition) >= state_->stores.size()) return;
  state_->stores[static_cast<size_t>(partition)] = store;
  state_->refused[static_cast<size_t>(partition)] = 0;
}

bool InMemoryPartitionServers::AwaitRefusedCall(int partition, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(state_->mu);
  if (partition < 0 || static_cast<size_t>(partition) >= state_->stores.size()) return false;
  return state_->refused_cv.wait_for(
      lock, timeout, [&] { return state_->refused[static_cast<size_t>(partition)] > 0; });
}

}  // namespace strata
