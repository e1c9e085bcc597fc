// Tensors without LibTorch: what the parameter server, the codec and checkpoints work on.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

namespace strata {

enum class DType : int { kFloat32 = 1, kInt64 = 2 };

size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);
absl::StatusOr<DType> DTypeFromName(const std::string& name);

int64_t NumElements(const std::vector<int64_t>& shape);
std::string ShapeString(const std::vector<int64_t>& shape);

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat32;

  int64_t numel() const { return NumElements(shape); }
  size_t bytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype); }
};

// An owned tensor: a spec and its raw little-endian bytes (malloc alignment suits every dtype).
struct NamedTensor {
  TensorSpec spec;
  std::vector<uint8_t> data;

  static NamedTensor Zeros(TensorSpec spec) {
    NamedTensor t{std::move(spec), {}};
    t.data.assign(t.spec.bytes(), 0);
    return t;
  }
  const std::string& name() const { return spec.name; }
  float* floats() { return reinterpret_cast<float*>(data.data()); }
  const float* floats() const { return reinterpret_cast<const float*>(data.data()); }
};

// A borrowed view of tensor bytes, for encoding without copying into a NamedTensor first.
struct TensorView {
  const TensorSpec* spec;
  const void* data;
};

}  // namespace strata
