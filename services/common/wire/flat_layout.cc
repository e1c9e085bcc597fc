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

}  // namespace strata
