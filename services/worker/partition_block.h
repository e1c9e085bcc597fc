// What the links that move a partition as one block of floats share (TcpPartitionLink and the
// in-memory link; gRPC sends tensor by tensor instead): the partition's tensors as runs of
// consecutive floats in the worker's buffers, how to gather them into one block and scatter one
// back, and the layout's fingerprint, by which the server tells that the block is laid out as
// its own (push_pull_wire::LayoutFingerprint).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "services/worker/partition_link.h"

namespace strata {

class PartitionBlock {
 public:
  // `tensors` in the plan's order, which the block keeps.
  explicit PartitionBlock(const std::vector<ModelTensor>& tensors);

  size_t floats() const { return floats_; }
  size_t bytes() const { return floats_ * sizeof(float); }
  uint64_t fingerprint() const { return fingerprint_; }

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
  uint64_t fingerprint_ = 0;
};

}  // namespace strata
