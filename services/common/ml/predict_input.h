// The examples of a Predict request (StreamReplica.Predict, Evaluator.Predict; docs/protocol.md,
// "Predict"), checked before anything of them is used: one chunk of the tensor wire format,
// float32, shape [N, the data set's example shape] with N from 1 to kMaxPredictExamples, a data
// size that is exactly that, every value finite. Whoever answers predictions for a model of this
// data set checks a request here, so every answerer refuses the same requests with the same words.
#pragma once

#include <cstdint>
#include <vector>

#include <absl/status/statusor.h>

#include "services/common/ml/dataset.h"
#include "strata/v1/tensor.pb.h"

namespace strata {

inline constexpr int64_t kMaxPredictExamples = 1024;

struct PredictInput {
  int64_t examples = 0;
  std::vector<float> features;  // examples x the data set's example floats
};

// INVALID_ARGUMENT saying what is wrong with `input`.
absl::StatusOr<PredictInput> CheckPredictInput(const v1::TensorChunk& input, const Dataset& data);

// The model's outputs as the reply's chunk: float32, `shape`.
void SetPredictScores(const std::vector<float>& scores, const std::vector<int64_t>& shape,
                      v1::TensorChunk* out);

}  // namespace strata
