#include "services/common/wire/flat_layout.h"

#include <algorithm>
#include <numeric>

#include <absl/strings/str_cat.h>

namespace strata {

absl::StatusOr<FlatLayout> FlatLayout::Create(const std::vector<TensorSpec>& tensors) {
  FlatLayout layout;
  for (const TensorSpec& spec : tensors) {
    if (spec.dtype != DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat("fused buffer holds float32 only; '",
                                                     spec.name, "' is ", DTypeName(spec.dtype)));
    }
    if (!layout.index_.emplace(spec.name, layout.entries_.size()).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate tensor name '", spec.name, "'"));
    }
    FlatEntry entry{spec, layout.total_, static_cast<size_t>(spec.numel())};
    layout.total_ += entry.numel;
    layout.entries_.push_back(std::move(entry));
  }
  return layout;
}

const FlatEntry* FlatLayout::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

absl::StatusOr<PartitionPlan> PlanPartitions(const std::vector<TensorSpec>& tensors,
                                             int partitions) {
  if (partitions < 1) return absl::InvalidArgumentError("partitions must be >= 1");
  if (static_cast<size_t>(partitions) > tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat(partitions, " parameter servers for ",
                                                   tensors.size(),
                                                   " tensors: a server would own nothing"));
  }
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return tensors[a].bytes() > tensors[b].bytes(); });
  PartitionPlan plan;
  plan.partitions = partitions;
  plan.owner.assign(tensors.size(), 0);
  plan.tensors_of.assign(partitions, {});
  plan.bytes_of.assign(partitions, 0);
  for (size_t i : order) {
    int target = static_cast<int>(std::min_element(plan.bytes_of.begin(), plan.bytes_of.end()) -
                                  plan.bytes_of.begin());
    plan.owner[i] = target;
    plan.bytes_of[target] += tensors[i].bytes();
  }
  for (size_t i = 0; i < tensors.size(); ++i) plan.tensors_of[plan.owner[i]].push_back(i);
  return plan;
}

}  // namespace strata
