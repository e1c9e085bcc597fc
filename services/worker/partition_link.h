// The seam between the push/pull clients (partition_clients.h: the partition plan and the fan-out
// over servers) and the way one partition's tensors travel to its server and back. The clients
// know partitions, versions and budgets; a PartitionLink knows stubs, sockets and shared memory.
// It is shaped like the ring's RingLink (ring_link.h). Three links exist:
//
// - GrpcPartitionLink (grpc_partition_link.h): the ParameterServer service's streams, tensors in
//   TensorChunks (proto/strata/v1/parameter_server.proto);
// - TcpPartitionLink (tcp_partition_link.h): the server's plain-TCP data plane, with the tensors
//   in a shared-memory region when the server runs on this host; a server that offers no data
//   plane is served over gRPC by the same link;
// - the in-memory link (in_memory_partition_link.h), which calls a PartitionStore of the same
//   process, for tests.
//
// One link serves one partition, one call at a time (the clients call it from one thread per
// partition). Every call takes the deadline in PartitionCallOptions; an error names the server
// (PartitionLinkOptions::Describe).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <absl/status/statusor.h>
#include <absl/strings/str_cat.h>

#include "services/common/wire/tensor.h"

namespace strata {

// One model tensor as the worker holds it: trainable parameters live in the trainer's fused
// buffers (parameters, gradients), float buffers in a copy the synchroniser keeps.
struct ModelTensor {
  TensorSpec spec;
  bool is_buffer = false;
  size_t offset = 0;  // floats, into the fused parameter buffer or the buffer copy
};

// What one exchange reads (the step's gradients and buffer values) and where it writes the reply
// (weights in the trainer's fused layout, buffer values).
struct ExchangeBuffers {
  const float* gradients = nullptr;
  const float* buffers_out = nullptr;
  float* parameters_in = nullptr;
  float* buffers_in = nullptr;
};

// What a push says about itself (PushHeader), apart from the worker.
struct PushFields {
  int64_t clock = 0;
  int64_t samples = 0;
  double lr = 0;
  // The version the gradients were computed on; < 0: each partition's installed version (the
  // clients fill it in before a link sees the push).
  int64_t version = -1;
};

// What a reply says about the partition (PullHeader, or the data plane's reply header).
struct PartitionReply {
  int64_t version = 0;
  int64_t samples = 0, sample_budget = 0;
  // The tensors' bytes as they travelled each way (16-bit values count 2 bytes each); 0 where
  // nothing travelled (the in-memory link).
  uint64_t bytes_pushed = 0, bytes_pulled = 0;
};

struct PartitionLinkOptions {
  int partition = 0;    // the server's index in the plan
  std::string address;  // host:port (the in-memory link: any name)
  int rank = 0;         // this worker
  // This partition's tensors, in model order (the plan's order, which the server's layout has).
  std::vector<ModelTensor> tensors;
  size_t chunk_bytes = 1 << 20;  // gRPC: payload per TensorChunk
  // The plain-TCP data plane: exchanges in 16 bits (PartitionClientsOptions::half_precision).
  bool half_precision = false;

  // "<what> parameter server <partition> (<address>)": how every error names the server.
  std::string Describe(const char* what) const {
    return absl::StrCat(what, " parameter server ", partition, " (", address, ")");
  }
};

// Per call: how long it may take, waits on the server included.
struct PartitionCallOptions {
  std::chrono::milliseconds deadline{60000};
};

// A stamp no other change of any link's Path() in this process has had (PartitionLink::path_stamp).
inline uint64_t NextPathStamp() {
  static std::atomic<uint64_t> last{0};
  return ++last;
}

class PartitionLink {
 public:
  virtual ~PartitionLink() = default;

  // A push of the gradients and buffer values in `x` (fields.version >= 0) and, in the same round
  // trip, the partition's model after it into x.parameters_in and x.buffers_in.
  virtual absl::StatusOr<PartitionReply> Exchange(const PushFields& fields,
                                                  const ExchangeBuffers& x,
                                                  const PartitionCallOptions& call) = 0;
  // The partition's current model into `parameters` (the fused layout) and `buffers`.
  virtual absl::StatusOr<PartitionReply> Pull(int64_t clock, float* parameters, float* buffers,
                                              const PartitionCallOptions& call) = 0;
  // A push alone (PDP and APDP's round update); returns the version that will reflect it.
  virtual absl::StatusOr<int64_t> Push(const PushFields& fields, const float* gradients,
                                       const float* buffers, const PartitionCallOptions& call) = 0;
  // How the tensors travel once a call has been made ("gRPC", "tcp", "shared memory", with the
  // reason for a fallback): for the worker's status and the run's events. Safe to read while
  // a call is in flight (a pipelined push/pull reads it after each step).
  virtual std::string Path() const = 0;
  // Changes whenever Path() may have (a value of NextPathStamp, so never the same for two links
  // or two changes): the training loop reads the paths only when some stamp moved, not every step.
  uint64_t path_stamp() const { return path_stamp_.load(std::memory_order_acquire); }

 protected:
  // For a link whose Path() changes after construction: call after each change.
  void PathChanged() { path_stamp_.store(NextPathStamp(), std::memory_order_release); }

 private:
  std::atomic<uint64_t> path_stamp_{NextPathStamp()};
};

using PartitionLinkFactory =
    std::function<absl::StatusOr<std::unique_ptr<PartitionLink>>(const PartitionLinkOptions&)>;

}  // namespace strata
