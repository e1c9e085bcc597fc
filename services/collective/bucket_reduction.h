// Gradient buckets reduced while backward runs. The fused gradient buffer is cut into buckets of
// whole parameters, taken from the last parameter to the first (the order backward completes
// them). The trainer reports each parameter whose gradient is complete (Trainer::
// SetGradientListener); once a bucket's parameters are all in, a thread of its own averages that
// range of the buffer over the ring while backward computes the rest. Buckets go out strictly in
// plan order, so every rank issues the same ring operations in the same order whatever order its
// hooks fire in; a bucket whose parameters got no gradient goes out when backward has ended.
//
// Every rank gets the same bits for every bucket (as from one operation over the whole buffer);
// the sums are formed in another order than with one operation, so the averages may differ from
// an unbucketed run's in the last bit (not with 2 ranks: a + b is exact in either order).
// docs/algorithms.md ("Overlapping the reduction with backward") has the measurements.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>
#include <vector>

#include <absl/status/status.h>

#include "services/collective/ring_allreduce.h"
#include "services/common/wire/flat_layout.h"

namespace strata {

struct GradientBucket {
  size_t begin = 0, end = 0;           // floats [begin, end) of the gradient buffer
  size_t first_param = 0, params = 0;  // parameters first_param .. first_param + params - 1
};

// Buckets of at least `bucket_bytes` (the last may be smaller) over whole parameters, from the
// last parameter of `parameters` to the first. `bucket_bytes` 0: one bucket of everything.
std::vector<GradientBucket> PlanGradientBuckets(const FlatLayout& parameters, size_t bucket_bytes);

class BucketReduction {
 public:
  // `gradients` is the fused gradient buffer laid out as `parameters`; `ring` must be connected
  // and both must outlive this object.
  BucketReduction(RingAllReduce* ring, const AllReduceOptions& options,
                  const FlatLayout& parameters, float* gradients, size_t bucket_bytes);
  ~BucketReduction();  // waits for the bucket in flight, if any
  BucketReduction(const BucketReduction&) = delete;
  BucketReduction& operator=(const BucketReduction&) = delete;

  // During backward, on its thread: parameter `index`'s gradient is complete in the buffer.
  void OnGradientReady(size_t index);
  // After backward: sends the buckets still waiting (parameters without a gradient keep the
  // zeros backward left), waits until every bucket is averaged and gets ready for the next step.
  // The first error of the step, naming the bucket; later buckets are then not sent.
  absl::Status Finish();

  size_t bucket_count() const { return buckets_.size(); }

 private:
  void Run();        // the reduction thread
  void ResetStep();  // with mu_ held

  RingAllReduce* const ring_;
  const AllReduceOptions options_;
  float* const gradients_;
  const std::vector<GradientBucket> buckets_;
  std::vector<size_t> bucket_of_;  // by parameter

  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<size_t> missing_;  // by bucket: parameters not yet reported this step
  std::vector<bool> reported_;   // by parameter
  size_t next_ = 0;              // the next bucket to send
  bool backward_done_ = false;
  bool quit_ = false;
  absl::Status status_;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace strata
