// Tensors to and from chunked wire messages (strata.v1.TensorChunk).
//
// Encoding copies each byte once, from the tensor into the reused message; decoding copies each
// byte once, from the message into the destination the caller chose. There is no per-element work:
// the wire format is the host's little-endian layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "services/common/wire/tensor.h"
#include "strata/v1/tensor.pb.h"

namespace strata {

struct ChunkOptions {
  // Large enough to amortise per-message cost, small enough that sender and receiver overlap and
  // no message comes near the gRPC size limit.
  size_t chunk_bytes = 1 << 20;
};

// Called once per chunk; the chunk is reused after the call returns. Return false to stop (the
// stream broke); EncodeTensor then fails with UNAVAILABLE.
using ChunkSink = std::function<bool(const v1::TensorChunk&)>;

absl::Status EncodeTensor(const TensorView& tensor, const ChunkOptions& options,
                          const ChunkSink& sink);

// The same, filling `chunk` in place (typically the chunk field of a reused envelope message such
// as a PushRequest) and calling `send` after each chunk, so the bytes go from the tensor into the
// outgoing message with one copy. `send` returns false when the stream broke.
absl::Status EncodeTensorInto(const TensorView& tensor, const ChunkOptions& options,
                              v1::TensorChunk* chunk, const std::function<bool()>& send);

void ToProto(const TensorSpec& spec, v1::TensorHeader* header);
absl::StatusOr<TensorSpec> FromProto(const v1::TensorHeader& header);

// Where the bytes of an announced tensor go. Returning an error (unknown name, wrong shape or
// dtype) refuses the whole stream before any byte is written.
using DestinationFn = std::function<absl::StatusOr<void*>(const TensorSpec& spec)>;

struct AssemblerLimits {
  size_t max_tensor_bytes = size_t{1} << 31;
  size_t max_total_bytes = size_t{1} << 33;
  // The data bytes the whole stream carries, when known up front (DecodeAll): a header declaring
  // more is refused as truncated before its destination is asked for, so it allocates nothing.
  size_t available_bytes = SIZE_MAX;
};

// Reassembles a stream of chunks into tensors, validating order, offsets and sizes.
class TensorAssembler {
 public:
  TensorAssembler(DestinationFn destination, AssemblerLimits limits = {});

  absl::Status Add(const v1::TensorChunk& chunk);
  // Fails if the stream ended inside a tensor.
  absl::Status Finish() const;

  // The tensors announced so far, in arrival order.
  const std::vector<TensorSpec>& received() const { return received_; }

 private:
  DestinationFn destination_;
  AssemblerLimits limits_;
  std::vector<TensorSpec> received_;
  uint8_t* current_ = nullptr;
  size_t current_bytes_ = 0;
  size_t filled_ = 0;
  size_t total_bytes_ = 0;
  bool in_tensor_ = false;
};

// Convenience for tests and small messages: all chunks of `tensors`, and back. DecodeAll sets
// `limits.available_bytes` to the bytes the chunks carry, so a declared size is checked against
// the data actually present before anything is allocated.
absl::StatusOr<std::vector<v1::TensorChunk>> EncodeAll(const std::vector<NamedTensor>& tensors,
                                                       const ChunkOptions& options = {});
absl::StatusOr<std::vector<NamedTensor>> DecodeAll(const std::vector<v1::TensorChunk>& chunks,
                                                   AssemblerLimits limits = {});

}  // namespace strata
