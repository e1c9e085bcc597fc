#include "services/worker/grpc_partition_link.h"

#include <absl/strings/str_cat.h>

#include "services/common/base/status.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/tensor_codec.h"

namespace strata {
namespace {

// The server's status explains a stream that ended early (a server that died mid-reply leaves
// tensors missing); our own finding explains a reply we refused while it was still coming (then
// the call is cancelled and the server's view is only "cancelled").
template <typename Stream>
absl::Status FinishCall(const absl::Status& received, bool reply_ended,
                        grpc::ClientContext* context, Stream* stream, const std::string& what) {
  const bool refused_open_reply =
      !received.ok() && !reply_ended && received.code() != absl::StatusCode::kUnavailable;
  if (refused_open_reply) context->TryCancel();
  const grpc::Status finished = stream->Finish();
  if (!finished.ok() && !refused_open_reply) return FromGrpcStatus(finished, what);
  return Annotate(received, what);
}

std::unique_ptr<grpc::ClientContext> NewContext(const PartitionCallOptions& call) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(DeadlineAfter(call.deadline));
  return context;
}

}  // namespace

GrpcPartitionLink::GrpcPartitionLink(PartitionLinkOptions options,
                                     std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)), stub_(v1::ParameterServer::NewStub(std::move(channel))) {
  for (const ModelTensor& t : options_.tensors) {
    tensor_bytes_ += static_cast<uint64_t>(t.spec.numel()) * sizeof(float);
  }
}

template <typename Stream>
absl::StatusOr<PartitionReply> GrpcPartitionLink::Receive(float* parameters, float* buffers,
                                                          Stream* stream, bool* ended) {
  const std::vector<ModelTensor>& tensors = options_.tensors;
  v1::PullResponse response;
  *ended = false;
  if (!stream->Read(&response)) {
    *ended = true;
    // Finish() says why the server ended the call; this only shows if it claims success.
    return absl::UnavailableError("the reply ended before its header");
  }
  if (!response.has_header()) {
    return absl::InternalError("the reply did not start with a PullHeader");
  }
  const v1::PullHeader header = response.header();
  std::vector<bool> seen(tensors.size(), false);
  TensorAssembler assembler([&](const TensorSpec& spec) -> absl::StatusOr<void*> {
    for (size_t k = 0; k < tensors.size(); ++k) {
      const ModelTensor& t = tensors[k];
      if (t.spec.name != spec.name) continue;
      if (t.spec.shape != spec.shape || spec.dtype != DType::kFloat32) {
        return absl::FailedPreconditionError(
            absl::StrCat("tensor '", spec.name, "' has shape ", ShapeString(spec.shape),
                         ", this worker's model has ", ShapeString(t.spec.shape),
                         ": the server holds a different model"));
      }
      if (seen[k]) return absl::InternalError(absl::StrCat("tensor '", spec.name, "' sent twice"));
      seen[k] = true;
      return static_cast<void*>((t.is_buffer ? buffers : parameters) + t.offset);
    }
    return absl::FailedPreconditionError(
        absl::StrCat("tensor '", spec.name,
                     "' is not in this partition of this worker's model: the server holds a "
                     "different model or partition plan"));
  });
  while (stream->Read(&response)) {
    if (!response.has_chunk()) return absl::InternalError("a second PullHeader inside the reply");
    STRATA_RETURN_IF_ERROR(assembler.Add(response.chunk()));
  }
  *ended = true;
  STRATA_RETURN_IF_ERROR(assembler.Finish());
  for (size_t k = 0; k < seen.size(); ++k) {
    if (!seen[k]) {
      return absl::FailedPreconditionError(
          absl::StrCat("the reply lacks tensor '", tensors[k].spec.name, "'"));
    }
  }
  return PartitionReply{header.version(), header.samples(), header.sample_budget()};
}

// Writes the header, then gradients of trainable tensors and values of buffers, cut into chunks
// straight from the trainer's memory into the reused message (one copy); false once the stream
// is closed.
template <typename Stream>
absl::Status GrpcPartitionLink::WritePush(const PushFields& fields, const float* gradients,
                                          const float* buffers, Stream* stream) {
  v1::PushRequest request;
  v1::PushHeader* header = request.mutable_header();
  header->set_worker(options_.rank);
  header->set_version(fields.version);
  header->set_clock(fields.clock);
  header->set_samples(fields.samples);
  header->set_lr(fields.lr);
  bool open = stream->Write(request);
  ChunkOptions chunking;
  chunking.chunk_bytes = options_.chunk_bytes;
  v1::TensorChunk* chunk = request.mutable_chunk();
  for (size_t k = 0; open && k < options_.tensors.size(); ++k) {
    const ModelTensor& t = options_.tensors[k];
    const float* values = (t.is_buffer ? buffers : gradients) + t.offset;
    open = EncodeTensorInto({&t.spec, values}, chunking, chunk, [&] {
             return stream->Write(request);
           }).ok();
  }
  if (open && stream->WritesDone()) return absl::OkStatus();
  return absl::UnavailableError("the server closed the stream during the push");
}

absl::StatusOr<PartitionReply> GrpcPartitionLink::Pull(int64_t clock, float* parameters,
                                                       float* buffers,
                                                       const PartitionCallOptions& call) {
  auto context = NewContext(call);
  v1::PullRequest request;
  request.set_worker(options_.rank);
  request.set_clock(clock);
  auto reader = stub_->Pull(context.get(), request);
  bool ended = false;
  absl::StatusOr<PartitionReply> received = Receive(parameters, buffers, reader.get(), &ended);
  STRATA_RETURN_IF_ERROR(FinishCall(received.status(), ended, context.get(), reader.get(),
                                    options_.Describe("pull from")));
  return received;
}

absl::StatusOr<int64_t> GrpcPartitionLink::Push(const PushFields& fields, const float* gradients,
                                                const float* buffers,
                                                const PartitionCallOptions& call) {
  auto context = NewContext(call);
  v1::PushReply reply;
  auto stream = stub_->Push(context.get(), &reply);
  const absl::Status written = WritePush(fields, gradients, buffers, stream.get());
  const grpc::Status finished = stream->Finish();
  if (!finished.ok()) return FromGrpcStatus(finished, options_.Describe("push to"));
  STRATA_RETURN_IF_ERROR(Annotate(written, options_.Describe("push to")));
  return reply.version();
}

absl::StatusOr<PartitionReply> GrpcPartitionLink::Exchange(const PushFields& fields,
                                                           const ExchangeBuffers& x,
                                                           const PartitionCallOptions& call) {
  auto context = NewContext(call);
  auto stream = stub_->PushPull(context.get());
  bool ended = false;
  absl::StatusOr<PartitionReply> received;
  if (absl::Status written = WritePush(fields, x.gradients, x.buffers_out, stream.get());
      written.ok()) {
    received = Receive(x.parameters_in, x.buffers_in, stream.get(), &ended);
  } else {
    received = written;
  }
  STRATA_RETURN_IF_ERROR(FinishCall(received.status(), ended, context.get(), stream.get(),
                                    options_.Describe("push/pull with")));
  received->bytes_pushed = received->bytes_pulled = tensor_bytes_;
  return received;
}

}  // namespace strata
