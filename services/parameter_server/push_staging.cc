#include "services/parameter_server/push_staging.h"

#include <algorithm>
#include <cmath>

#include <absl/strings/str_cat.h>

#include "services/common/ml/sgd.h"

namespace strata {

PushStaging::PushStaging(std::shared_ptr<const PartitionLayout> layout)
    : layout_(std::move(layout)),
      values_(layout_->total_floats),
      seen_(layout_->entries.size(), false) {}

absl::StatusOr<void*> PushStaging::Destination(const TensorSpec& spec) {
  auto it = layout_->index.find(spec.name);
  if (it == layout_->index.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown tensor '", spec.name, "': this partition does not hold it"));
  }
  const PartitionLayout::Entry& e = layout_->entries[it->second];
  if (spec.dtype != DType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", spec.name, "' has dtype ",
                                                   DTypeName(spec.dtype), ", expected float32"));
  }
  if (spec.shape != e.spec.shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", spec.name, "' has shape ",
                                                   ShapeString(spec.shape), ", expected ",
                                                   ShapeString(e.spec.shape)));
  }
  if (seen_[it->second]) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", spec.name, "' sent twice in one push"));
  }
  seen_[it->second] = true;
  return static_cast<void*>(values_.data() + e.offset);
}

float* PushStaging::WholeDestination() {
  std::fill(seen_.begin(), seen_.end(), true);
  scanned_ = false;
  return values_.data();
}

absl::Status CheckPushMeta(const PushMeta& meta, int workers) {
  if (meta.worker < 0 || meta.worker >= workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("push from worker ", meta.worker, ": this job has workers 0..", workers - 1));
  }
  if (meta.version < 0 || meta.clock < 0 || meta.samples < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("push from worker ", meta.worker, ": negative version, clock or samples"));
  }
  if (!std::isfinite(meta.lr) || meta.lr < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push from worker ", meta.worker, ": learning rate ", meta.lr, " is not a number >= 0"));
  }
  if (meta.lr > kMaxLearningRate) {
    return absl::InvalidArgumentError(absl::StrCat("push from worker ", meta.worker,
                                                   ": learning rate ", meta.lr,
                                                   " is above the limit of ", kMaxLearningRate));
  }
  return absl::OkStatus();
}

absl::Status PushStaging::Validate() {
  for (size_t i = 0; i < seen_.size(); ++i) {
    if (!seen_[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("push lacks tensor '", layout_->entries[i].spec.name, "'"));
    }
  }
  // A NaN or Inf would poison the model for every worker. One vectorised pass over the whole
  // push; only a push that holds one is searched again, to name the tensor and element.
  if (!scanned_) max_abs_ = MaxAbsOrInfinity(values(), values_.size());
  scanned_ = false;  // a reused staging is scanned again unless its next push notes it
  if (std::isfinite(max_abs_)) return absl::OkStatus();
  for (const auto& e : layout_->entries) {
    const float* p = values() + e.offset;
    const size_t n = static_cast<size_t>(e.spec.numel());
    for (size_t k = 0; k < n; ++k) {
      if (!std::isfinite(p[k])) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", e.spec.name, "' holds ", p[k], " at element ", k));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace strata
