// Which parameter server holds what: the plan every party (workers, servers) computes from the
// same tensor list, and the pieces it may cut large tensors into.
//
// A model's tensors are rarely of similar sizes: in an MLP the first weight matrix is most of the
// model (85% of the quickstart's `mlp`). Dealt out whole, one server then carries almost every byte
// and a second server adds little. With splitting on (`strategy.ps_split`, the default), a tensor
// larger than an even share is cut along its first dimension into pieces of near-equal rows,
// each a contiguous range of its floats, and the pieces are dealt out like tensors. A piece
// travels and is stored under its own name, "<tensor>[<first row>:<end row>]", so a server's
// checkpoint, status and pulls are self-describing; JoinPieces puts the tensors back together
// for whoever reads the model from the servers (the evaluator, the handover check).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "services/common/wire/tensor.h"

namespace strata {

// One server's share of a tensor: the whole tensor, or rows [first_row, end_row) of it.
struct TensorPiece {
  size_t tensor = 0;        // index into the planned list
  TensorSpec spec;          // the piece's own name and shape ([end_row - first_row, ...])
  size_t float_offset = 0;  // of the piece's first float within the tensor
  int64_t first_row = 0;
  int64_t end_row = 0;
  bool whole = true;
};

struct PartitionPlan {
  int partitions = 0;
  std::vector<std::vector<TensorPiece>> pieces_of;  // per partition, in the list's order
  std::vector<size_t> bytes_of;                     // per partition
};

// Greedy by size (largest piece to the least loaded partition; ties by input order), which keeps
// partitions within one piece's size of each other. With `split`, a tensor larger than
// ceil(total / partitions) with at least two rows is first cut into ceil(size / share) pieces
// (at most one per row). Fails if there are fewer pieces than partitions (a server would own
// nothing).
absl::StatusOr<PartitionPlan> PlanPartitions(const std::vector<TensorSpec>& tensors, int partitions,
                                             bool split = true);

// The rows a plan cuts a tensor by: its first dimension (1 for a scalar).
int64_t RowsOf(const TensorSpec& spec);

// "fc1.weight[0:392]".
std::string PieceName(const std::string& tensor, int64_t first_row, int64_t end_row);

// The tensor and rows a piece's name names; nullopt for a name that is not exactly what PieceName
// writes.
struct PieceOfName {
  std::string tensor;
  int64_t first_row = 0;
  int64_t end_row = 0;
};
std::optional<PieceOfName> ParsePieceName(const std::string& name);

// The piece's floats copied out of the whole tensor; refused when the tensor's bytes do not hold
// the piece (a tensor of another shape than the plan's).
absl::StatusOr<NamedTensor> SlicePiece(const NamedTensor& whole, const TensorPiece& piece);

// Tensors read from the servers with every split tensor put back together, in the order each
// first appears. Refused, naming the tensor: pieces that overlap, leave rows out or disagree on
// the shape of a row, and a tensor that comes both whole and in pieces. (Rows missing at the end
// leave the tensor short: its reader compares the shapes with the model's.)
absl::StatusOr<std::vector<NamedTensor>> JoinPieces(std::vector<NamedTensor> tensors);

}  // namespace strata
