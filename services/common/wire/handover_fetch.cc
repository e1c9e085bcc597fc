#include "services/common/wire/handover_fetch.h"

#include <grpcpp/grpcpp.h>

#include <absl/strings/str_cat.h>

#include "services/common/base/status.h"
#include "services/common/wire/rpc.h"
#include "strata/v1/worker.grpc.pb.h"

namespace strata {

absl::StatusOr<Checkpoint> FetchHandoverModel(const std::string& worker_address, int64_t step,
                                              const HandoverFetchOptions& options) {
  const std::string origin =
      absl::StrCat("the handover model of step ", step, " from worker ", worker_address);
  auto stub = v1::Worker::NewStub(MakeChannel(worker_address));
  grpc::ClientContext context;
  context.set_deadline(options.deadline);
  v1::HandoverModelRequest request;
  request.set_step(step);
  auto reader = stub->GetHandoverModel(&context, request);
  std::string bytes;
  uint64_t total = 0;
  bool first = true;
  v1::CheckpointChunk chunk;
  absl::Status bad;
  while (bad.ok() && reader->Read(&chunk)) {
    if (first) {
      total = chunk.total_bytes();
      if (total > options.max_bytes) {
        bad = absl::InvalidArgumentError(absl::StrCat(
            origin, " announces ", total, " bytes, above the limit of ", options.max_bytes));
        break;
      }
      bytes.reserve(total);
      first = false;
    }
    if (chunk.total_bytes() != total || chunk.offset() != bytes.size() ||
        chunk.data().size() > total - bytes.size()) {
      bad = absl::InvalidArgumentError(
          absl::StrCat(origin, ": a chunk at offset ", chunk.offset(), " of ", chunk.data().size(),
                       " bytes (total ", chunk.total_bytes(), ") does not continue the ",
                       bytes.size(), " of ", total, " bytes received"));
      break;
    }
    bytes.append(chunk.data());
  }
  if (!bad.ok()) {
    context.TryCancel();
    reader->Finish();
    return bad;
  }
  grpc::Status finished = reader->Finish();
  if (!finished.ok()) return FromGrpcStatus(finished, origin);
  if (first || bytes.size() != total) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, " ended after ", bytes.size(), " of ", total, " bytes"));
  }
  return ParseCheckpoint(bytes, origin);
}

}  // namespace strata
