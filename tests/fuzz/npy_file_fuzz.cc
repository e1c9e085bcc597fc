// The .npy reader (services/common/wire/npy_file.h) on arbitrary bytes, as a user's train_x.npy
// reaches it. Each input is read three ways:
//   - ParseNpy as it is, with the default limits. An accepted array has 1 to 8 dimensions, each
//     >= 0; its data lie exactly between the header and the end of the input; the helpers
//     (RowsToFloat, FirstNonFiniteRow, ReadLabels) agree with a plain reading of those bytes; and
//     its shape and dtype encode again (EncodeNpyHeader) to a file that parses to the same array;
//   - ParseNpy with tight limits (a 128-byte header, 2 dimensions, 256 bytes of data): nothing
//     above them is accepted;
//   - with the data replaced by exactly as many bytes as the header declares, when ParseNpyHeader
//     accepts the header and it declares at most 1 MiB: that file must be accepted. A mutated
//     shape almost never matches the bytes that follow, and this lets the fuzzer past the size
//     check to the helpers.
// Every refusal is one line that starts with the origin. With the reader's trailing-bytes check
// removed on purpose, seed-trailing-bytes broke the first invariant of CheckArray at once.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <absl/strings/str_cat.h>
#include <absl/strings/string_view.h>

#include "services/common/wire/npy_file.h"
#include "tests/fuzz/fuzz_check.h"

namespace strata {
namespace {

void CheckRefusal(const absl::Status& status) {
  const std::string message(status.message());
  FUZZ_CHECK(message.rfind("fuzz: ", 0) == 0, message);
  FUZZ_CHECK(message.find('\n') == std::string::npos, message);
}

bool NonFiniteAt(const NpyArray& a, int64_t element) {
  const uint8_t* p = a.data() + element * static_cast<int64_t>(a.item_size());
  if (a.dtype() == NpyDType::kFloat32) {
    float v;
    std::memcpy(&v, p, 4);
    return !std::isfinite(v);
  }
  double v;
  std::memcpy(&v, p, 8);
  return !std::isfinite(v);
}

int64_t IntegerAt(const NpyArray& a, int64_t element) {
  const uint8_t* p = a.data() + element * static_cast<int64_t>(a.item_size());
  switch (a.dtype()) {
    case NpyDType::kUInt8:
      return *p;
    case NpyDType::kInt8:
      return static_cast<int8_t>(*p);
    case NpyDType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    default: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
}

void CheckArray(const NpyArray& a, absl::string_view bytes) {
  const std::vector<int64_t>& shape = a.shape();
  FUZZ_CHECK(!shape.empty() && shape.size() <= 8, a.Describe());
  int64_t row_elements = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    FUZZ_CHECK(shape[i] >= 0, a.Describe());
    if (i > 0) row_elements *= shape[i];
  }
  FUZZ_CHECK(a.row_elements() == row_elements, a.Describe());
  FUZZ_CHECK(a.data_offset() >= 10 &&
                 a.data_offset() + a.data_bytes() == static_cast<int64_t>(bytes.size()),
             absl::StrCat(a.Describe(), ": data at ", a.data_offset(), ", ", a.data_bytes(),
                          " bytes, in ", bytes.size()));
  FUZZ_CHECK(a.data() == reinterpret_cast<const uint8_t*>(bytes.data()) + a.data_offset(),
             "the data are not where the header ends");
  FUZZ_CHECK(a.rows() * a.row_bytes() == a.data_bytes(), a.Describe());

  // Every row to floats: ASan sees any read outside the input.
  const int64_t elements = a.elements();
  std::vector<float> floats(static_cast<size_t>(elements));
  RowsToFloat(a, 0, a.rows(), floats.data());
  for (int64_t i = 0; i < elements; ++i) {
    if (a.dtype() == NpyDType::kFloat32) {
      FUZZ_CHECK(std::memcmp(&floats[i], a.data() + i * 4, 4) == 0, "float32 changed on reading");
    } else if (a.dtype() != NpyDType::kFloat64) {
      FUZZ_CHECK(floats[i] == static_cast<float>(IntegerAt(a, i)), "an integer changed on reading");
    }
  }

  const std::optional<int64_t> non_finite = FirstNonFiniteRow(a);
  if (!NpyIsFloat(a.dtype()) || a.row_elements() == 0) {
    FUZZ_CHECK(!non_finite.has_value(), "a non-finite row in an array without floats");
  } else {
    int64_t first = -1;
    for (int64_t i = 0; i < elements && first < 0; ++i) {
      if (NonFiniteAt(a, i)) first = i / a.row_elements();
    }
    FUZZ_CHECK(non_finite.value_or(-1) == first,
               absl::StrCat("FirstNonFiniteRow ", non_finite.value_or(-1), ", expected ", first));
  }

  std::vector<int32_t> labels;
  const absl::Status read = ReadLabels(a, -1, &labels);
  if (NpyIsFloat(a.dtype()) || a.row_elements() != 1) {
    FUZZ_CHECK(!read.ok(), "labels read from " + a.Describe());
  } else {
    bool in_range = true;
    for (int64_t row = 0; row < a.rows(); ++row) {
      const int64_t label = IntegerAt(a, row);
      in_range = in_range && label >= 0 && label < std::numeric_limits<int32_t>::max();
    }
    FUZZ_CHECK(read.ok() == in_range, read.ToString());
    if (read.ok()) {
      FUZZ_CHECK(labels.size() == static_cast<size_t>(a.rows()), "labels of another count");
      for (int64_t row = 0; row < a.rows(); ++row) {
        FUZZ_CHECK(labels[static_cast<size_t>(row)] == IntegerAt(a, row), "a label changed");
      }
    }
  }
  if (!read.ok()) CheckRefusal(read);

  // The same array as np.save writes it.
  auto header = EncodeNpyHeader(a.dtype(), shape);
  FUZZ_CHECK(header.ok(), header.status().ToString());
  FUZZ_CHECK(header->size() % 64 == 0, "np.save aligns the data to 64 bytes");
  const std::string again =
      *header + std::string(reinterpret_cast<const char*>(a.data()), a.data_bytes());
  auto back = ParseNpy(again, "fuzz (written again)");
  FUZZ_CHECK(back.ok(), back.status().ToString());
  FUZZ_CHECK(back->dtype() == a.dtype() && back->shape() == shape, back->Describe());
  FUZZ_CHECK(std::memcmp(back->data(), a.data(), a.data_bytes()) == 0, "the data changed");
}

void ParseAndCheck(absl::string_view bytes) {
  auto array = ParseNpy(bytes, "fuzz");
  if (array.ok()) {
    CheckArray(*array, bytes);
  } else {
    CheckRefusal(array.status());
  }

  NpyLimits tight;
  tight.max_header_bytes = 128;
  tight.max_dims = 2;
  tight.max_data_bytes = 256;
  auto small = ParseNpy(bytes, "fuzz", tight);
  if (small.ok()) {
    FUZZ_CHECK(small->shape().size() <= 2 && small->data_bytes() <= 256 &&
                   small->data_offset() <= 12 + 128,
               small->Describe());
  } else {
    CheckRefusal(small.status());
  }
}

}  // namespace
}  // namespace strata

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  strata::ParseAndCheck(bytes);

  auto header = strata::ParseNpyHeader(bytes, "fuzz");
  if (!header.ok()) {
    strata::CheckRefusal(header.status());
    return 0;
  }
  if (header->data_bytes > (int64_t{1} << 20)) return 0;
  // The header as it is, then the declared number of bytes, taken from what followed it.
  std::string fixed(bytes.substr(0, static_cast<size_t>(header->data_offset)));
  const absl::string_view rest = bytes.substr(fixed.size());
  for (int64_t i = 0; i < header->data_bytes; ++i) {
    fixed.push_back(rest.empty() ? '\0' : rest[static_cast<size_t>(i) % rest.size()]);
  }
  auto array = strata::ParseNpy(fixed, "fuzz");
  FUZZ_CHECK(array.ok(),
             "the header parsed alone, but not with its data: " + array.status().ToString());
  FUZZ_CHECK(array->shape() == header->shape && array->dtype() == header->dtype, array->Describe());
  strata::CheckArray(*array, fixed);
  return 0;
}
