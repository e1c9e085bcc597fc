// Checkpoints: model tensors, optimizer state and progress in one file, without LibTorch, so the
// parameter server reads what a worker wrote (the switch hands a model over this way).
//
// Layout (little-endian):
//   "STRATACK"  8 bytes magic
//   u32         format version (kCheckpointFormatVersion)
//   u32         length of the JSON metadata
//   JSON
//   {"epoch","step","version","extra":{...},"tensors":[{"name","shape","dtype","kind","bytes"}]}
//   bytes       tensor data, in metadata order
//   u32         CRC-32 of everything before it
// Written atomically (temp, fsync, rename); truncation and corruption are detected on read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <absl/status/statusor.h>
#include <nlohmann/json.hpp>

#include "services/common/wire/tensor.h"

namespace strata {

inline constexpr uint32_t kCheckpointFormatVersion = 1;

enum class TensorKind { kParameter, kBuffer, kMomentum };
const char* TensorKindName(TensorKind kind);

struct CheckpointEntry {
  TensorKind kind = TensorKind::kParameter;
  NamedTensor tensor;
};

struct Checkpoint {
  int64_t epoch = 0;
  int64_t step = 0;
  int64_t version = 0;
  nlohmann::json extra = nlohmann::json::object();  // arch, lr, partition, ...
  std::vector<CheckpointEntry> entries;

  const CheckpointEntry* Find(TensorKind kind, const std::string& name) const;
};

absl::StatusOr<std::string> SerializeCheckpoint(const Checkpoint& checkpoint);
absl::StatusOr<Checkpoint> ParseCheckpoint(const std::string& bytes, const std::string& origin);

// `beneath`, when not empty, confines the file to that directory with no link followed below it
// (FileAccessOptions, services/common/base/files.h): what every path from a request passes.
// Written 0600: a checkpoint is the model the run token protects.
absl::Status WriteCheckpoint(const std::string& path, const Checkpoint& checkpoint,
                             const std::string& beneath = "");
absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path, const std::string& beneath = "");

}  // namespace strata
