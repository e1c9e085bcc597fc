// The receiving side of the streamed handover: the model of the switch step, read from a worker
// (Worker.GetHandoverModel) instead of from a file that worker wrote, so that servers and workers
// need no shared file system (containers, other machines). The parameter servers load it; the
// orchestrator reads it to check what the servers hold. The bytes are the checkpoint file format,
// so they are validated exactly like a file: magic, version, sizes, CRC.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <absl/status/statusor.h>

#include "services/common/wire/checkpoint.h"

namespace strata {

struct HandoverFetchOptions {
  // The whole fetch, connection included, ends by then with DEADLINE_EXCEEDED naming the worker.
  std::chrono::system_clock::time_point deadline;
  // A worker announcing more than this is refused before anything is allocated for it.
  // Default: 4 GiB, far above any model Strata trains; lower it to bound a server's memory.
  uint64_t max_bytes = uint64_t{4} << 30;
};

// Streams the handover model of `step` from the worker at `worker_address` and parses it.
// FAILED_PRECONDITION (passed on) when the worker holds no model of that step;
// INVALID_ARGUMENT when the stream lies about its size or order, or the bytes are not a checkpoint.
absl::StatusOr<Checkpoint> FetchHandoverModel(const std::string& worker_address, int64_t step,
                                              const HandoverFetchOptions& options);

}  // namespace strata
