// The tensors a partition holds (PartitionLayout) and one push decoded against them
// (PushStaging). A push is decoded and checked into a PushStaging without the partition's lock,
// so pushes from many workers decode in parallel; only applying it takes the lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <absl/container/flat_hash_map.h>
#include <absl/status/statusor.h>

#include "services/common/wire/tensor.h"
#include "services/parameter_server/consistency_policy.h"

namespace strata {

// The tensors this partition holds, in model order (trainable parameters first, then buffers).
struct PartitionLayout {
  struct Entry {
    TensorSpec spec;
    bool is_buffer = false;
    size_t offset = 0;  // in floats, into the partition's value buffer
  };
  std::vector<Entry> entries;
  absl::flat_hash_map<std::string, size_t> index;
  size_t parameter_floats = 0;  // parameters occupy [0, parameter_floats)
  size_t total_floats = 0;
  uint64_t generation = 0;  // changes on every load, so a push decoded before a reload is refused
  // push_pull_wire::LayoutFingerprint of the entries: what a plain-TCP push must name.
  uint64_t fingerprint = 0;
};

// The checks of a push's header that need no model: a worker of this job, no negative version,
// clock or sample count, a learning rate that is a number in [0, kMaxLearningRate].
absl::Status CheckPushMeta(const PushMeta& meta, int workers);

// One push, decoded and checked outside the partition's lock.
class PushStaging {
 public:
  explicit PushStaging(std::shared_ptr<const PartitionLayout> layout);
  // Where an announced tensor's bytes go: refuses unknown names, wrong shape or dtype, repeats.
  absl::StatusOr<void*> Destination(const TensorSpec& spec);
  // The whole push in one piece, in layout order (the plain-TCP data plane reads it straight in):
  // every tensor counts as present.
  float* WholeDestination();
  // The largest magnitude of the values, found while they arrived (infinity: a NaN or Inf among
  // them); Validate then does not scan them again.
  void NoteScanned(float max_abs) {
    max_abs_ = max_abs;
    scanned_ = true;
  }
  // After the stream ended: every tensor present, every value finite.
  absl::Status Validate();
  // After Validate succeeded: the largest magnitude in the push (what lets the store prove that
  // applying it cannot overflow); infinity before.
  float max_abs() const { return max_abs_; }
  size_t total_bytes() const { return layout_->total_floats * sizeof(float); }

  const PartitionLayout& layout() const { return *layout_; }
  // Gradients of the parameters, then the buffers, as the layout orders them.
  const float* values() const { return values_.data(); }

 private:
  std::shared_ptr<const PartitionLayout> layout_;
  std::vector<float> values_;
  std::vector<bool> seen_;
  float max_abs_ = std::numeric_limits<float>::infinity();
  bool scanned_ = false;
};

}  // namespace strata
