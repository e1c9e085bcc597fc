#include "services/collective/bucket_reduction.h"

#include <absl/strings/str_cat.h>

#include "services/common/base/status.h"

namespace strata {

std::vector<GradientBucket> PlanGradientBuckets(const FlatLayout& parameters, size_t bucket_bytes) {
  const std::vector<FlatEntry>& entries = parameters.entries();
  std::vector<GradientBucket> buckets;
  GradientBucket open;
  for (size_t k = entries.size(); k-- > 0;) {
    const FlatEntry& e = entries[k];
    if (open.params == 0) open.end = e.offset + e.numel;
    open.begin = e.offset;
    open.first_param = k;
    ++open.params;
    if (bucket_bytes > 0 && (open.end - open.begin) * sizeof(float) >= bucket_bytes) {
      buckets.push_back(open);
      open = GradientBucket{};
    }
  }
  if (open.params > 0) buckets.push_back(open);
  return buckets;
}

BucketReduction::BucketReduction(RingAllReduce* ring, const AllReduceOptions& options,
                                 const FlatLayout& parameters, float* gradients,
                                 size_t bucket_bytes)
    : ring_(ring),
      options_(options),
      gradients_(gradients),
      buckets_(PlanGradientBuckets(parameters, bucket_bytes)),
      bucket_of_(parameters.entries().size(), 0) {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (size_t k = 0; k < buckets_[b].params; ++k) bucket_of_[buckets_[b].first_param + k] = b;
  }
  ResetStep();
  thread_ = std::thread([this] { Run(); });
}

BucketReduction::~BucketReduction() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void BucketReduction::ResetStep() {
  missing_.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) missing_[b] = buckets_[b].params;
  reported_.assign(bucket_of_.size(), false);
  next_ = 0;
  backward_done_ = false;
  status_ = absl::OkStatus();
}

void BucketReduction::OnGradientReady(size_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index >= reported_.size()) return;
  if (reported_[index]) {
    // Its bucket may be on its way already: a second contribution would be lost on some ranks.
    if (status_.ok()) {
      status_ = absl::FailedPreconditionError(absl::StrCat(
          "parameter ", index,
          " received a second gradient in one backward pass (a parameter "
          "used twice): overlapped buckets need one per parameter; set strategy.bucket_mb: 0"));
    }
    return;
  }
  reported_[index] = true;
  if (--missing_[bucket_of_[index]] == 0) changed_.notify_all();
}

absl::Status BucketReduction::Finish() {
  std::unique_lock<std::mutex> lock(mu_);
  backward_done_ = true;
  changed_.notify_all();
  changed_.wait(lock, [&] { return next_ == buckets_.size(); });
  const absl::Status status = status_;
  ResetStep();
  return status;
}

void BucketReduction::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    changed_.wait(lock, [&] {
      return quit_ || (next_ < buckets_.size() && (missing_[next_] == 0 || backward_done_));
    });
    if (quit_) return;
    const GradientBucket b = buckets_[next_];
    absl::Status reduced;
    if (status_.ok()) {
      // The ranks' other buckets and backward run on while this one travels.
      lock.unlock();
      reduced = ring_->AllReduceAverage(gradients_ + b.begin, b.end - b.begin, options_);
      lock.lock();
    }
    if (!reduced.ok() && status_.ok()) {
      status_ =
          Annotate(reduced, absl::StrCat("gradient bucket ", next_ + 1, " of ", buckets_.size(),
                                         " (floats ", b.begin, "..", b.end, ")"));
    }
    ++next_;
    if (next_ == buckets_.size()) changed_.notify_all();
  }
}

}  // namespace strata
