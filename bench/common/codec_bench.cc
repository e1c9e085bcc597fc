// Tensor codec throughput against memcpy of the same bytes (the floor any codec pays once).
// Encode: tensor -> chunk messages (one copy into the reused message). Decode: chunk messages ->
// destination buffer (one copy out). Goal: each >= 0.5 of memcpy.
#include <cstring>
#include <vector>

#include <benchmark/benchmark.h>

#include "services/common/wire/tensor_codec.h"

namespace strata {
namespace {

NamedTensor MakeTensor(size_t bytes) {
  NamedTensor t = NamedTensor::Zeros({"w", {static_cast<int64_t>(bytes / 4)}, DType::kFloat32});
  for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = static_cast<uint8_t>(i * 31);
  return t;
}

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<uint8_t> src(bytes, 1), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

void BM_Encode(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  NamedTensor t = MakeTensor(bytes);
  ChunkOptions options;
  options.chunk_bytes = static_cast<size_t>(state.range(1));
  size_t sent = 0;
  for (auto _ : state) {
    absl::Status s = EncodeTensor({&t.spec, t.data.data()}, options, [&](const v1::TensorChunk& c) {
      sent += c.data().size();
      benchmark::DoNotOptimize(c.data().data());
      return true;
    });
    if (!s.ok()) state.SkipWithError("encode failed");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

void BM_Decode(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  ChunkOptions options;
  options.chunk_bytes = static_cast<size_t>(state.range(1));
  auto chunks = *EncodeAll({MakeTensor(bytes)}, options);
  std::vector<uint8_t> dst(bytes);
  for (auto _ : state) {
    TensorAssembler assembler([&](const TensorSpec&) -> absl::StatusOr<void*> { return dst.data(); });
    for (const auto& c : chunks) {
      if (!assembler.Add(c).ok()) state.SkipWithError("decode failed");
    }
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

// 1.1 MB (ResNet-20), 4 MB, 25 MB, 64 MB; chunk 1 MiB (the default).
BENCHMARK(BM_Memcpy)->Arg(1 << 20)->Arg(4 << 20)->Arg(25 << 20)->Arg(64 << 20);
BENCHMARK(BM_Encode)->Args({1 << 20, 1 << 20})->Args({4 << 20, 1 << 20})->Args({25 << 20, 1 << 20})->Args({64 << 20, 1 << 20});
BENCHMARK(BM_Decode)->Args({1 << 20, 1 << 20})->Args({4 << 20, 1 << 20})->Args({25 << 20, 1 << 20})->Args({64 << 20, 1 << 20});

}  // namespace
}  // namespace strata

BENCHMARK_MAIN();
