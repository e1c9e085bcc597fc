// How a test reads what a parameter server holds without the product's own code for it: a tensor
// split over the servers (strategy.ps_split) comes back as pieces named
// "<tensor>[<first row>:<end row>]", each rows [first, end) of the tensor; any other name is a
// whole tensor.
#pragma once

#include <cstdint>
#include <regex>
#include <string>
#include <vector>

#include "services/common/wire/tensor.h"

namespace strata::testing {

struct ServerPiece {
  std::string tensor;     // the whole tensor's name
  bool piece = false;     // false: the whole tensor
  int64_t first_row = 0;  // with piece
  int64_t end_row = 0;
};

inline ServerPiece ReadServerTensorName(const std::string& name) {
  static const std::regex piece_name(R"((.+)\[(\d+):(\d+)\])");
  std::smatch m;
  if (!std::regex_match(name, m, piece_name)) return {name};
  return {m[1], true, std::stoll(m[2]), std::stoll(m[3])};
}

// The bytes of `whole` that a server's tensor read as `p` must hold: all of them, or the rows of
// the piece (clipped to the tensor, so that a piece past its end shows up as a difference).
inline std::vector<uint8_t> BytesFor(const NamedTensor& whole, const ServerPiece& p) {
  if (!p.piece || whole.spec.shape.empty() || whole.spec.shape[0] <= 0) return whole.data;
  const size_t row_bytes = whole.data.size() / static_cast<size_t>(whole.spec.shape[0]);
  const size_t first = std::min(static_cast<size_t>(p.first_row) * row_bytes, whole.data.size());
  const size_t end = std::min(static_cast<size_t>(p.end_row) * row_bytes, whole.data.size());
  return std::vector<uint8_t>(whole.data.begin() + first, whole.data.begin() + end);
}

}  // namespace strata::testing
