#include "services/common/wire/tensor.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

namespace strata {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kInt64:
      return 8;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kInt64:
      return "int64";
  }
  return "unknown";
}

absl::StatusOr<DType> DTypeFromName(const std::string& name) {
  if (name == "float32") return DType::kFloat32;
  if (name == "int64") return DType::kInt64;
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", name, "'"));
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, "x"), "]");
}

}  // namespace strata
