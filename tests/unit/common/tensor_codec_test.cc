#include "services/common/wire/tensor_codec.h"

#include <cmath>
#include <numeric>

#include <gtest/gtest.h>

namespace strata {
namespace {

NamedTensor Iota(const std::string& name, std::vector<int64_t> shape, float start = 0) {
  NamedTensor t = NamedTensor::Zeros({name, std::move(shape), DType::kFloat32});
  std::iota(t.floats(), t.floats() + t.spec.numel(), start);
  return t;
}

void ExpectSame(const NamedTensor& a, const NamedTensor& b) {
  EXPECT_EQ(a.spec.name, b.spec.name);
  EXPECT_EQ(a.spec.shape, b.spec.shape);
  EXPECT_EQ(a.spec.dtype, b.spec.dtype);
  EXPECT_EQ(a.data, b.data);
}

// Sizes around the chunk size, odd sizes, empty tensors, several tensors per stream.
TEST(TensorCodec, RoundTripsAtChunkBoundaries) {
  for (size_t chunk : {64u, 100u, 4096u}) {
    for (int64_t n : {0, 1, 15, 16, 17, 25, 1023, 1024, 1025, 3001}) {
      std::vector<NamedTensor> in = {Iota("a", {n}), Iota("b", {3, 5}, 7)};
      auto chunks = EncodeAll(in, {chunk});
      ASSERT_TRUE(chunks.ok()) << chunks.status();
      for (const auto& c : *chunks) EXPECT_LE(c.data().size(), chunk);
      auto out = DecodeAll(*chunks);
      ASSERT_TRUE(out.ok()) << out.status();
      ASSERT_EQ(out->size(), 2u);
      ExpectSame(in[0], (*out)[0]);
      ExpectSame(in[1], (*out)[1]);
    }
  }
}

TEST(TensorCodec, Int64RoundTrip) {
  NamedTensor t = NamedTensor::Zeros({"steps", {5}, DType::kInt64});
  auto* p = reinterpret_cast<int64_t*>(t.data.data());
  for (int i = 0; i < 5; ++i) p[i] = (int64_t{1} << 40) + i;
  auto out = DecodeAll(*EncodeAll({t}, {16}));
  ASSERT_TRUE(out.ok());
  ExpectSame(t, (*out)[0]);
}

TEST(TensorCodec, RefusesTruncatedStream) {
  auto chunks = *EncodeAll({Iota("w", {1000})}, {256});
  chunks.pop_back();
  auto out = DecodeAll(chunks);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("'w' truncated"), std::string::npos) << out.status();
}

TEST(TensorCodec, RefusesTensorCutShortByTheNext) {
  auto first = *EncodeAll({Iota("w", {1000})}, {256});
  auto second = *EncodeAll({Iota("b", {10})}, {256});
  std::vector<v1::TensorChunk> mixed = {first[0], second[0]};
  auto out = DecodeAll(mixed);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("'w' truncated"), std::string::npos) << out.status();
}

TEST(TensorCodec, RefusesMoreBytesThanTheShapeHolds) {
  auto chunks = *EncodeAll({Iota("w", {4})});
  chunks[0].mutable_data()->append("xxxx");
  auto out = DecodeAll(chunks);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("holds 16"), std::string::npos) << out.status();
}

TEST(TensorCodec, RefusesOutOfOrderChunks) {
  auto chunks = *EncodeAll({Iota("w", {100})}, {64});
  std::swap(chunks[1], chunks[2]);
  EXPECT_FALSE(DecodeAll(chunks).ok());
}

TEST(TensorCodec, RefusesBadHeaders) {
  v1::TensorChunk c;
  c.mutable_header()->set_name("x");
  c.mutable_header()->add_shape(2);
  c.mutable_header()->set_dtype(v1::DTYPE_UNSPECIFIED);
  auto out = DecodeAll({c});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("unsupported dtype"), std::string::npos);

  c.mutable_header()->set_dtype(v1::DTYPE_FLOAT32);
  c.mutable_header()->set_shape(0, -3);
  EXPECT_FALSE(DecodeAll({c}).ok());

  v1::TensorChunk headless;
  headless.set_data("abcd");
  EXPECT_FALSE(DecodeAll({headless}).ok());

  v1::TensorChunk unnamed;
  unnamed.mutable_header()->set_dtype(v1::DTYPE_FLOAT32);
  EXPECT_FALSE(DecodeAll({unnamed}).ok());
}

TEST(TensorCodec, EnforcesSizeLimits) {
  auto chunks = *EncodeAll({Iota("big", {1000})});
  AssemblerLimits limits;
  limits.max_tensor_bytes = 1000;
  auto out = DecodeAll(chunks, limits);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("exceeds the limit"), std::string::npos);
  limits = {};
  limits.max_total_bytes = 6000;
  EXPECT_FALSE(DecodeAll(*EncodeAll({Iota("a", {1000}), Iota("b", {1000})}), limits).ok());
}

TEST(TensorCodec, DestinationCanRefuseBeforeAnyByteIsWritten) {
  std::vector<float> buffer(4, -1.0f);
  TensorAssembler assembler([&](const TensorSpec& spec) -> absl::StatusOr<void*> {
    if (spec.name != "known") return absl::InvalidArgumentError("unknown tensor " + spec.name);
    return static_cast<void*>(buffer.data());
  });
  auto chunks = *EncodeAll({Iota("unknown", {4}, 5)});
  EXPECT_FALSE(assembler.Add(chunks[0]).ok());
  EXPECT_EQ(buffer, std::vector<float>(4, -1.0f));
}

TEST(TensorCodec, EncoderReportsABrokenStream) {
  NamedTensor t = Iota("w", {100});
  int calls = 0;
  absl::Status s = EncodeTensor({&t.spec, t.data.data()}, {64}, [&](const v1::TensorChunk&) {
    return ++calls < 2;
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace strata
