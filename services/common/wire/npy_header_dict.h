// The header dict of a .npy file, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), },
// parsed by hand as the hostile text it may be: exactly those three keys, strings without
// escapes, integers without leading zeros, no nesting, and never evaluated. A refusal says where
// the text stops making sense and quotes it printably. This is the text part of npy_file.h; what
// the dict declares is checked against the file there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <absl/status/status.h>
#include <absl/strings/string_view.h>

// The .npy reader's own early return: it is part of strata_formats, which the fuzz targets link,
// and does not include base/status.h (which brings in gRPC's headers).
#define NPY_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::absl::Status npy_status_ = (expr);       \
    if (!npy_status_.ok()) return npy_status_; \
  } while (0)

namespace strata {

struct NpyHeaderDict {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// `major` is the format version (1, 2 or 3; headers of 1 and 2 may carry Python 2's 'L' after a
// dimension); `max_dims` bounds the shape tuple.
absl::Status ParseNpyHeaderDict(absl::string_view text, int major, int max_dims,
                                NpyHeaderDict* out);

// Bytes of a hostile header, quoted for a one-line message: printable ASCII as it is, '"', '\'
// and every other byte as \xHH; at most `max` bytes, then "...".
std::string QuoteHostileBytes(absl::string_view text, size_t max = 40);

// A header string as Python would print it ('x'), or quoted as hostile bytes when it is long or
// holds a quote.
std::string PyQuoted(absl::string_view text);

}  // namespace strata
