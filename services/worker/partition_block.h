// What the links that move a partition as one block of floats share (TcpPartitionLink and the
// in-memory link; gRPC sends tensor by tensor instead): the partition's tensors as runs of
// consecutive floats in the worker's buffers, how to gather them into one block and scatter one
// back, and the layout's fingerprint, by which the server tells that the block is laid out as
// its own (push_pull_wire::LayoutFingerprint).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "services/common/wire/push_pull_frame.h"
#include "services/worker/partition_link.h"

namespace strata {

class PartitionBlock {
 public:
  // `tensors` in the plan's order, which the block keeps.
  explicit PartitionBlock(const std::vector<ModelTensor>& tensors);

  size_t floats() const { return floats_; }
  size_t bytes() const { return floats_ * sizeof(float); }
  uint64_t fingerprint() const { return fingerprint_; }

  // 16-bit exchanges (strategy.push_compression: fp16) send the parameters' values as halves and
  // the buffers' as floats, parameters first as in the server's layout; a block whose buffers
  // come first (no plan cuts one so) has no 16-bit form.
  bool has_half_form() const { return parameters_first_ && parameter_floats_ > 0; }
  size_t parameter_floats() const { return parameter_floats_; }
  size_t half_form_bytes() const {
    return push_pull_wire::PayloadBytes(parameter_floats_, floats_ - parameter_floats_, true);
  }
  // The parameter runs of `gradients` as halves into `into` (parameter_floats() long); false
  // when a value has no finite half (beyond 65,504, or not a number).
  bool GatherHalves(const float* gradients, uint16_t* into) const;
  // `from` (parameter_floats() halves) into the parameter runs of `parameters`.
  void ScatterHalves(const uint16_t* from, float* parameters) const;
  // Calls f(at, floats) for each run of buffer values, in block order.
  template <typename T, typename F>
  void ForEachBufferRun(T* buffers, F&& f) const {
    for (const Run& r : runs_) {
      if (r.is_buffer) f(buffers + r.offset, r.floats);
    }
  }

  // Calls f(from, floats) for each run, in block order, with `parameters` or `buffers` +
  // the run's offset.
  template <typename F>
  void ForEachRun(const float* parameters, const float* buffers, F&& f) const {
    for (const Run& r : runs_) f((r.is_buffer ? buffers : parameters) + r.offset, r.floats);
  }
  template <typename F>
  void ForEachRun(float* parameters, float* buffers, F&& f) const {
    for (const Run& r : runs_) f((r.is_buffer ? buffers : parameters) + r.offset, r.floats);
  }
  // The block from `gradients` and `buffers` into `into` (bytes() long).
  void Gather(const float* gradients, const float* buffers, void* into) const;
  // The block at `from` (bytes() long) into `parameters` and `buffers`.
  void Scatter(const void* from, float* parameters, float* buffers) const;

 private:
  struct Run {
    bool is_buffer = false;
    size_t offset = 0, floats = 0;
  };
  std::vector<Run> runs_;
  size_t floats_ = 0;
  size_t parameter_floats_ = 0;
  bool parameters_first_ = true;
  uint64_t fingerprint_ = 0;
};

}  // namespace strata
