#include "services/worker/partition_block.h"

#include <cstring>

#include "services/common/wire/half_float.h"
#include "services/common/wire/push_pull_frame.h"

namespace strata {

PartitionBlock::PartitionBlock(const std::vector<ModelTensor>& tensors) {
  push_pull_wire::LayoutFingerprint fingerprint;
  for (const ModelTensor& t : tensors) {
    fingerprint.Add(t.spec, t.is_buffer);
    const auto n = static_cast<size_t>(t.spec.numel());
    if (!runs_.empty() && runs_.back().is_buffer == t.is_buffer &&
        runs_.back().offset + runs_.back().floats == t.offset) {
      runs_.back().floats += n;
    } else {
      runs_.push_back({t.is_buffer, t.offset, n});
    }
    floats_ += n;
    if (!t.is_buffer) {
      if (parameter_floats_ < floats_ - n) parameters_first_ = false;  // a buffer came before
      parameter_floats_ += n;
    }
  }
  fingerprint_ = fingerprint.value();
}

void PartitionBlock::Gather(const float* gradients, const float* buffers, void* into) const {
  auto* at = static_cast<uint8_t*>(into);
  ForEachRun(gradients, buffers, [&](const float* from, size_t floats) {
    std::memcpy(at, from, floats * sizeof(float));
    at += floats * sizeof(float);
  });
}

void PartitionBlock::Scatter(const void* from, float* parameters, float* buffers) const {
  const auto* at = static_cast<const uint8_t*>(from);
  ForEachRun(parameters, buffers, [&](float* into, size_t floats) {
    std::memcpy(into, at, floats * sizeof(float));
    at += floats * sizeof(float);
  });
}

bool PartitionBlock::GatherHalves(const float* gradients, uint16_t* into) const {
  bool finite = true;
  for (const Run& r : runs_) {
    if (r.is_buffer) continue;
    finite &= FloatsToFiniteHalves(gradients + r.offset, r.floats, into);
    into += r.floats;
  }
  return finite;
}

void PartitionBlock::ScatterHalves(const uint16_t* from, float* parameters) const {
  for (const Run& r : runs_) {
    if (r.is_buffer) continue;
    HalvesToFloats(from, r.floats, parameters + r.offset);
    from += r.floats;
  }
}

}  // namespace strata
