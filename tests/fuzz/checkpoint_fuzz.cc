// The checkpoint parser (services/common/wire/checkpoint.h) on bytes, as a parameter server reads a
// handover model streamed from a worker or a file named in a request. A checkpoint the parser
// accepts must serialise again, and that serialisation must parse back to the same checkpoint.
//
// A mutated checkpoint almost never keeps its CRC, which the parser checks only after the
// metadata; so each input is parsed twice, as it is and with its last four bytes replaced by the
// right CRC, to let the fuzzer past the checksum to the tensor data.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include <absl/strings/str_cat.h>
#include <zlib.h>

#include "services/common/wire/checkpoint.h"
#include "tests/fuzz/fuzz_check.h"

namespace strata {
namespace {

bool SameCheckpoint(const Checkpoint& a, const Checkpoint& b) {
  if (a.epoch != b.epoch || a.step != b.step || a.version != b.version || a.extra != b.extra ||
      a.entries.size() != b.entries.size()) {
    return false;
  }
  for (size_t i = 0; i < a.entries.size(); ++i) {
    const CheckpointEntry& x = a.entries[i];
    const CheckpointEntry& y = b.entries[i];
    if (x.kind != y.kind || x.tensor.spec.name != y.tensor.spec.name ||
        x.tensor.spec.shape != y.tensor.spec.shape || x.tensor.spec.dtype != y.tensor.spec.dtype ||
        x.tensor.data != y.tensor.data) {
      return false;
    }
  }
  return true;
}

void ParseAndRoundTrip(const std::string& bytes) {
  auto parsed = ParseCheckpoint(bytes, "fuzz");
  if (!parsed.ok()) return;
  size_t total = 0;
  for (const CheckpointEntry& e : parsed->entries) {
    FUZZ_CHECK(e.tensor.data.size() == e.tensor.spec.bytes(), e.tensor.name());
    total += e.tensor.data.size();
  }
  FUZZ_CHECK(total <= bytes.size(), absl::StrCat(total, " tensor bytes from ", bytes.size()));
  auto serialized = SerializeCheckpoint(*parsed);
  FUZZ_CHECK(serialized.ok(), serialized.status().ToString());
  auto again = ParseCheckpoint(*serialized, "fuzz (serialised again)");
  FUZZ_CHECK(again.ok(), again.status().ToString());
  FUZZ_CHECK(SameCheckpoint(*parsed, *again), "the checkpoint changed on a round trip");
  auto twice = SerializeCheckpoint(*again);
  FUZZ_CHECK(twice.ok() && *twice == *serialized, "serialisation is not stable");
}

}  // namespace
}  // namespace strata

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  strata::ParseAndRoundTrip(bytes);
  if (size >= 4) {
    const uint32_t crc =
        static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0), data, static_cast<uInt>(size - 4)));
    std::memcpy(bytes.data() + size - 4, &crc, 4);
    strata::ParseAndRoundTrip(bytes);
  }
  return 0;
}
