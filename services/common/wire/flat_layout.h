// The fused view of a model: every float tensor at a named offset in one contiguous buffer, so
// that communication sends one buffer instead of one message per tensor. (Which server holds
// which tensors: partition_plan.h.)
#pragma once

#include <string>
#include <vector>

#include <absl/container/flat_hash_map.h>
#include <absl/status/statusor.h>

#include "services/common/wire/tensor.h"

namespace strata {

struct FlatEntry {
  TensorSpec spec;
  size_t offset = 0;  // in elements
  size_t numel = 0;
};

class FlatLayout {
 public:
  FlatLayout() = default;
  // Float32 tensors only: the fused buffer is a float buffer.
  static absl::StatusOr<FlatLayout> Create(const std::vector<TensorSpec>& tensors);

  size_t total_floats() const { return total_; }
  const std::vector<FlatEntry>& entries() const { return entries_; }
  const FlatEntry* Find(const std::string& name) const;

 private:
  std::vector<FlatEntry> entries_;
  absl::flat_hash_map<std::string, size_t> index_;
  size_t total_ = 0;
};

}  // namespace strata
