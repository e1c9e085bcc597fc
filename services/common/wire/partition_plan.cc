#include "services/common/wire/partition_plan.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>

namespace strata {

int64_t RowsOf(const TensorSpec& spec) { return spec.shape.empty() ? 1 : spec.shape[0]; }

namespace {

// The tensor `spec` as `cut` pieces of near-equal rows (one, the tensor itself, for cut 1).
void CutInto(size_t index, const TensorSpec& spec, int64_t cut, std::vector<TensorPiece>* out) {
  const int64_t rows = RowsOf(spec);
  if (cut <= 1) {
    out->push_back({index, spec, 0, 0, rows, true});
    return;
  }
  const size_t row_floats = static_cast<size_t>(spec.numel() / std::max<int64_t>(rows, 1));
  for (int64_t k = 0; k < cut; ++k) {
    TensorPiece piece;
    piece.tensor = index;
    piece.first_row = rows * k / cut;
    piece.end_row = rows * (k + 1) / cut;
    piece.spec = spec;
    piece.spec.name = PieceName(spec.name, piece.first_row, piece.end_row);
    piece.spec.shape[0] = piece.end_row - piece.first_row;
    piece.float_offset = static_cast<size_t>(piece.first_row) * row_floats;
    piece.whole = false;
    out->push_back(std::move(piece));
  }
}

}  // namespace

absl::StatusOr<PartitionPlan> PlanPartitions(const std::vector<TensorSpec>& tensors, int partitions,
                                             bool split) {
  if (partitions < 1) return absl::InvalidArgumentError("partitions must be >= 1");
  size_t total = 0;
  for (const TensorSpec& t : tensors) total += t.bytes();
  const size_t share = (total + static_cast<size_t>(partitions) - 1) / partitions;
  std::vector<TensorPiece> pieces;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& t = tensors[i];
    int64_t cut = 1;
    if (split && partitions > 1 && t.bytes() > share && RowsOf(t) >= 2 && !t.shape.empty()) {
      cut = std::min<int64_t>(RowsOf(t), static_cast<int64_t>((t.bytes() + share - 1) / share));
    }
    CutInto(i, t, cut, &pieces);
  }
  if (static_cast<size_t>(partitions) > pieces.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        partitions, " parameter servers for ", tensors.size(), " tensors in ", pieces.size(),
        " piece(s)", split ? "" : " (strategy.ps_split false)", ": a server would own nothing"));
  }
  std::vector<size_t> order(pieces.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return pieces[a].spec.bytes() > pieces[b].spec.bytes();
  });
  PartitionPlan plan;
  plan.partitions = partitions;
  plan.pieces_of.assign(partitions, {});
  plan.bytes_of.assign(partitions, 0);
  std::vector<int> owner(pieces.size(), 0);
  for (size_t i : order) {
    const int target = static_cast<int>(
        std::min_element(plan.bytes_of.begin(), plan.bytes_of.end()) - plan.bytes_of.begin());
    owner[i] = target;
    plan.bytes_of[target] += pieces[i].spec.bytes();
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    plan.pieces_of[owner[i]].push_back(std::move(pieces[i]));
  }
  return plan;
}

std::string PieceName(const std::string& tensor, int64_t first_row, int64_t end_row) {
  return absl::StrCat(tensor, "[", first_row, ":", end_row, "]");
}

std::optional<PieceOfName> ParsePieceName(const std::string& name) {
  if (name.empty() || name.back() != ']') return std::nullopt;
  const size_t open = name.rfind('[');
  if (open == std::string::npos || open == 0) return std::nullopt;
  const std::string rows = name.substr(open + 1, name.size() - open - 2);
  const size_t colon = rows.find(':');
  if (colon == std::string::npos) return std::nullopt;
  PieceOfName piece;
  piece.tensor = name.substr(0, open);
  if (!absl::SimpleAtoi(rows.substr(0, colon), &piece.first_row) ||
      !absl::SimpleAtoi(rows.substr(colon + 1), &piece.end_row) || piece.first_row < 0 ||
      piece.end_row <= piece.first_row ||
      PieceName(piece.tensor, piece.first_row, piece.end_row) != name) {
    return std::nullopt;  // only what PieceName writes: no spaces, signs or leading zeros
  }
  return piece;
}

absl::StatusOr<NamedTensor> SlicePiece(const NamedTensor& whole, const TensorPiece& piece) {
  const size_t from = piece.float_offset * DTypeSize(whole.spec.dtype);
  if (whole.spec.dtype != piece.spec.dtype || whole.data.size() != whole.spec.bytes() ||
      from > whole.data.size() || piece.spec.bytes() > whole.data.size() - from) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", whole.name(), "' (",
                                                   whole.data.size(), " bytes) has no piece ",
                                                   piece.spec.name));
  }
  NamedTensor out = NamedTensor::Zeros(piece.spec);
  std::memcpy(out.data.data(), whole.data.data() + from, out.data.size());
  return out;
}

absl::StatusOr<std::vector<NamedTensor>> JoinPieces(std::vector<NamedTensor> tensors) {
  struct Split {
    size_t slot = 0;  // where the joined tensor goes in the output
    std::vector<std::pair<PieceOfName, NamedTensor>> pieces;
  };
  std::vector<std::optional<NamedTensor>> slots;
  std::map<std::string, Split> splits;
  for (NamedTensor& t : tensors) {
    std::optional<PieceOfName> piece = ParsePieceName(t.name());
    if (!piece) {
      slots.emplace_back(std::move(t));
      continue;
    }
    auto [it, added] = splits.try_emplace(piece->tensor);
    if (added) {
      it->second.slot = slots.size();
      slots.emplace_back(std::nullopt);
    }
    it->second.pieces.emplace_back(std::move(*piece), std::move(t));
  }
  for (const auto& s : slots) {
    if (s && splits.count(s->name())) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", s->name(), " came both whole and in pieces"));
    }
  }
  for (auto& [name, split] : splits) {
    auto& pieces = split.pieces;
    std::sort(pieces.begin(), pieces.end(),
              [](const auto& a, const auto& b) { return a.first.first_row < b.first.first_row; });
    const TensorSpec& first = pieces.front().second.spec;
    TensorSpec spec = first;
    spec.name = name;
    int64_t next_row = 0;
    for (const auto& [rows, t] : pieces) {
      const bool same_row_shape =
          t.spec.dtype == first.dtype && t.spec.shape.size() == first.shape.size() &&
          !t.spec.shape.empty() &&
          std::equal(t.spec.shape.begin() + 1, t.spec.shape.end(), first.shape.begin() + 1);
      if (!same_row_shape || t.spec.shape[0] != rows.end_row - rows.first_row ||
          t.data.size() != t.spec.bytes()) {
        return absl::InvalidArgumentError(
            absl::StrCat("piece ", t.name(), " does not have the shape of its rows"));
      }
      if (rows.first_row != next_row) {
        return absl::InvalidArgumentError(
            absl::StrCat("the pieces of ", name,
                         rows.first_row < next_row ? " overlap at row " : " leave out row ",
                         std::min(rows.first_row, next_row)));
      }
      next_row = rows.end_row;
    }
    spec.shape[0] = next_row;
    NamedTensor joined = NamedTensor::Zeros(spec);
    size_t at = 0;
    for (const auto& [rows, t] : pieces) {
      std::memcpy(joined.data.data() + at, t.data.data(), t.data.size());
      at += t.data.size();
    }
    slots[split.slot] = std::move(joined);
  }
  std::vector<NamedTensor> out;
  out.reserve(slots.size());
  for (auto& s : slots) out.push_back(std::move(*s));
  return out;
}

}  // namespace strata
