// The tensor codec (services/common/wire/tensor_codec.h) on what any gRPC client can send. The
// input is an EvaluateRequest, a list of TensorChunk messages exactly as Evaluator.EvaluateTensors
// receives them, decoded two ways:
//   - DecodeAll with its default limits, as the evaluator and the orchestrator decode: whatever it
//     accepts must encode again, at any chunk size, and decode back to the same tensors;
//   - a TensorAssembler streaming into fixed buffers that belong to a small model, as a parameter
//     server's push does (no byte count known up front): no write may leave its buffer.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <absl/strings/str_cat.h>
#include <google/protobuf/stubs/logging.h>

#include "services/common/wire/tensor_codec.h"
#include "strata/v1/evaluator.pb.h"
#include "tests/fuzz/fuzz_check.h"

namespace strata {
namespace {

bool SameSpec(const TensorSpec& a, const TensorSpec& b) {
  return a.name == b.name && a.shape == b.shape && a.dtype == b.dtype;
}

void DecodeAllAndRoundTrip(const std::vector<v1::TensorChunk>& chunks, size_t input_size) {
  auto decoded = DecodeAll(chunks);
  if (!decoded.ok()) return;
  size_t total = 0;
  for (const NamedTensor& t : *decoded) {
    FUZZ_CHECK(t.data.size() == t.spec.bytes(), t.name());
    total += t.data.size();
  }
  // Every byte decoded was carried by the request: nothing was allocated on a header's word.
  FUZZ_CHECK(total <= input_size, absl::StrCat(total, " bytes decoded from ", input_size));
  const size_t chunk_bytes = 1 + input_size % 200;  // EncodeTensor rounds this up to 64
  auto encoded = EncodeAll(*decoded, {chunk_bytes});
  FUZZ_CHECK(encoded.ok(), encoded.status().ToString());
  auto again = DecodeAll(*encoded);
  FUZZ_CHECK(again.ok(), again.status().ToString());
  FUZZ_CHECK(again->size() == decoded->size(), "tensor count changed");
  for (size_t i = 0; i < again->size(); ++i) {
    const NamedTensor& a = (*decoded)[i];
    const NamedTensor& b = (*again)[i];
    FUZZ_CHECK(SameSpec(a.spec, b.spec), a.name());
    FUZZ_CHECK(a.data == b.data, a.name());
  }
}

// A parameter server's partition in miniature: its Destination refuses any tensor it does not
// hold, by name, shape and dtype.
void StreamIntoModel(const std::vector<v1::TensorChunk>& chunks) {
  static const std::vector<TensorSpec> kModel = {{"fc.weight", {4, 3}, DType::kFloat32},
                                                 {"fc.bias", {3}, DType::kFloat32},
                                                 {"steps", {}, DType::kInt64},
                                                 {"empty", {0, 5}, DType::kFloat32}};
  std::vector<std::vector<uint8_t>> buffers;
  for (const TensorSpec& spec : kModel) buffers.emplace_back(spec.bytes());
  TensorAssembler assembler(
      [&](const TensorSpec& spec) -> absl::StatusOr<void*> {
        for (size_t i = 0; i < kModel.size(); ++i) {
          if (SameSpec(spec, kModel[i])) return static_cast<void*>(buffers[i].data());
        }
        return absl::NotFoundError(absl::StrCat("no tensor '", spec.name, "' of that shape"));
      },
      AssemblerLimits{.max_tensor_bytes = 1 << 10, .max_total_bytes = 1 << 12});
  for (const v1::TensorChunk& chunk : chunks) {
    if (!assembler.Add(chunk).ok()) return;
  }
  if (!assembler.Finish().ok()) return;
  for (const TensorSpec& spec : assembler.received()) {
    bool known = false;
    for (const TensorSpec& m : kModel) known = known || SameSpec(spec, m);
    FUZZ_CHECK(known, spec.name);
  }
}

}  // namespace
}  // namespace strata

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // its complaints about bad input are expected here
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::v1::EvaluateRequest request;
  // Protobuf's own parser is not the subject; an input it refuses never reaches the codec.
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  const std::vector<strata::v1::TensorChunk> chunks(request.tensors().begin(),
                                                    request.tensors().end());
  strata::DecodeAllAndRoundTrip(chunks, size);
  strata::StreamIntoModel(chunks);
  return 0;
}
