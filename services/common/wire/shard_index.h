// The per-worker shard index file: which training examples one worker reads. Written by the
// sharder (shard-<worker>.idx in the plan directory), read by the worker's data loader. Torch-free.
//
// Format, version 1 (all integers little-endian):
//   offset  size        field
//        0     8        magic "STRATAIX"
//        8     4        version (uint32) = 1
//       12     4        reserved (uint32) = 0
//       16     8        examples (uint64): size of the training split the indices refer to
//       24     8        count (uint64): number of indices that follow
//       32     8*count  indices (int64), strictly increasing, each in [0, examples)
//   32+8*count 4        CRC-32 (zlib polynomial) of every preceding byte
// File size is exactly 36 + 8*count, so truncation, trailing garbage and bit flips are all caught.
// Indices are sorted because the data loader reshuffles every epoch anyway; sorting makes the file
// a pure function of the plan and lets the reader reject duplicates.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <absl/status/status.h>
#include <absl/status/statusor.h>

namespace strata {

inline constexpr char kShardIndexMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'I', 'X'};
inline constexpr uint32_t kShardIndexVersion = 1;

struct ShardIndex {
  uint64_t examples = 0;         // size of the split the indices refer to
  std::vector<int64_t> indices;  // strictly increasing
};

// Encodes `indices` (sorted here; duplicates or values outside [0, examples) are an error).
absl::StatusOr<std::string> EncodeShardIndex(std::vector<int64_t> indices, uint64_t examples);

// Decodes and checks a whole file's bytes; `origin` names the file in error messages.
absl::StatusOr<ShardIndex> DecodeShardIndex(const std::string& bytes, const std::string& origin);

// Writes atomically (temporary file, fsync, rename).
absl::Status WriteShardIndex(const std::string& path, std::vector<int64_t> indices,
                             uint64_t examples);

// Reads and checks a file; DataLoss on truncation or corruption, NotFound if it is missing.
absl::StatusOr<ShardIndex> ReadShardIndexFile(const std::string& path);

// The worker's entry point: the example indices of one shard.
absl::StatusOr<std::vector<int64_t>> ReadShardIndex(const std::string& path);

// What the services of a run take from the sharder's manifest (the plan directory's
// manifest.json): the facts the job learns only once the sharder has run.
struct ShardPlanFacts {
  int64_t examples = 0;     // the training-set size the plan covers
  int workers = 0;          // the shards it holds, one per worker
  std::string fingerprint;  // of the data set's files ("crc32:...")
  struct Shard {
    int worker = -1;
    std::string file;  // its index file's name in the plan directory
    int64_t count = -1;
  };
  std::vector<Shard> shards;  // as the manifest lists them (empty in a manifest without the list)
};
absl::StatusOr<ShardPlanFacts> ReadShardPlanFacts(const std::string& manifest_path);

// What a worker's own job says its shard must be.
struct ShardExpectation {
  int rank = 0;
  int workers = 0;             // the job's cluster.workers
  int64_t train_examples = 0;  // the training set the worker loaded (after dataset.max_train)
  std::string fingerprint;     // the data set's fingerprint; empty: not compared
};

// Reads the shard index at `index_path` and the plan's manifest.json beside it, and checks them
// against `expected`: the plan holds `workers` shards, the file is the one the manifest lists for
// `rank`, with the count listed there, and the plan, the file and the worker all refer to the same
// training set (its size, and the fingerprint when given). Returns the indices; otherwise
// FailedPrecondition naming the file and what does not match (DataLoss or NotFound from reading).
// A worker calls this before training, so that a plan made for another job is refused rather
// than trained on.
absl::StatusOr<std::vector<int64_t>> CheckShardIndexFor(const std::string& index_path,
                                                        const ShardExpectation& expected);

}  // namespace strata
