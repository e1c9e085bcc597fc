// Push/pull over the ParameterServer service's gRPC streams
// (proto/strata/v1/parameter_server.proto): PushPull for an exchange, Pull and Push alone. The push
// is cut into TensorChunks straight from the trainer's memory into one reused message; the reply is
// assembled straight into the trainer's memory, each tensor checked by name and shape against this
// worker's model, so a server holding another model is refused naming the tensor.
#pragma once

#include <memory>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include "services/worker/partition_link.h"
#include "strata/v1/parameter_server.grpc.pb.h"

namespace strata {

class GrpcPartitionLink final : public PartitionLink {
 public:
  // Over `channel` (a TcpPartitionLink shares its control plane's with the one it falls back to).
  GrpcPartitionLink(PartitionLinkOptions options, std::shared_ptr<grpc::Channel> channel);

  absl::StatusOr<PartitionReply> Exchange(const PushFields& fields, const ExchangeBuffers& x,
                                          const PartitionCallOptions& call) override;
  absl::StatusOr<PartitionReply> Pull(int64_t clock, float* parameters, float* buffers,
                                      const PartitionCallOptions& call) override;
  absl::StatusOr<int64_t> Push(const PushFields& fields, const float* gradients,
                               const float* buffers, const PartitionCallOptions& call) override;
  std::string Path() const override { return "gRPC"; }

 private:
  // Reads a reply (a PullHeader, then the partition's tensors) into `parameters` and `buffers`.
  // *ended: the stream was read to its end (or broke), so the server's status explains it.
  template <typename Stream>
  absl::StatusOr<PartitionReply> Receive(float* parameters, float* buffers, Stream* stream,
                                         bool* ended);
  // The header, then the gradients of trainable tensors and the values of buffers, in chunks.
  template <typename Stream>
  absl::Status WritePush(const PushFields& fields, const float* gradients, const float* buffers,
                         Stream* stream);

  const PartitionLinkOptions options_;
  const std::unique_ptr<v1::ParameterServer::Stub> stub_;
  // The partition's tensors in bytes, always 32-bit here (the messages' own framing not counted):
  // what an exchange moves each way.
  uint64_t tensor_bytes_ = 0;
};

}  // namespace strata
