#include "services/common/ml/predict_input.h"

#include <cmath>
#include <cstring>
#include <string>

#include <absl/strings/str_cat.h>

#include "services/common/ml/sgd.h"

namespace strata {

absl::StatusOr<PredictInput> CheckPredictInput(const v1::TensorChunk& input, const Dataset& data) {
  const v1::TensorHeader& header = input.header();
  if (!input.has_header() || header.dtype() != v1::DTYPE_FLOAT32) {
    return absl::InvalidArgumentError(
        "the input must be one float32 tensor (a TensorChunk with its header)");
  }
  if (input.offset() != 0) {
    return absl::InvalidArgumentError("the input must come whole, in one chunk (offset 0)");
  }
  const std::vector<int64_t> shape(header.shape().begin(), header.shape().end());
  if (absl::Status s = data.CheckExampleBatch(shape, kMaxPredictExamples); !s.ok()) return s;
  PredictInput out;
  out.examples = shape[0];
  const size_t floats = static_cast<size_t>(out.examples) * data.example_floats();
  if (input.data().size() != floats * sizeof(float)) {
    return absl::InvalidArgumentError(
        absl::StrCat(input.data().size(), " bytes of data for ", floats, " floats"));
  }
  out.features.resize(floats);
  std::memcpy(out.features.data(), input.data().data(), input.data().size());
  if (!std::isfinite(MaxAbsOrInfinity(out.features.data(), floats))) {
    return absl::InvalidArgumentError("the input holds a value that is not finite (NaN or infinity)");
  }
  return out;
}

void SetPredictScores(const std::vector<float>& scores, const std::vector<int64_t>& shape,
                      v1::TensorChunk* out) {
  out->mutable_header()->set_name("scores");
  out->mutable_header()->set_dtype(v1::DTYPE_FLOAT32);
  for (int64_t d : shape) out->mutable_header()->add_shape(d);
  out->set_data(reinterpret_cast<const char*>(scores.data()), scores.size() * sizeof(float));
}

}  // namespace strata
