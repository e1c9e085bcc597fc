// The stream event decoder (services/common/stream/stream_event.h) on arbitrary entries, as a
// stream's entries reach a replica from a broker anyone with its address may write to
// (stream_entry_bytes.h turns the input into an entry). Each entry is decoded against two
// schemas. An accepted event has the schema's shape, as many features as it needs, every one
// finite, a label in range, a time >= 0; and it encodes again to fields that decode to the same
// event bit for bit. Every refusal is one line that names the entry. With the finiteness check
// removed from the decoder on purpose, seed-nan broke the "every feature finite" invariant at
// once.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "services/common/stream/stream_event.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/stream_entry_bytes.h"

namespace strata {
namespace {

void DecodeAndCheck(const StreamEntry& entry, const EventSchema& schema) {
  auto event = DecodeStreamEvent(entry, schema);
  if (!event.ok()) {
    const std::string message(event.status().message());
    FUZZ_CHECK(message.rfind("stream entry ", 0) == 0, message);
    FUZZ_CHECK(message.find('\n') == std::string::npos, message);
    FUZZ_CHECK(message.size() < 1024, message);
    return;
  }
  FUZZ_CHECK(event->shape == schema.shape, ShapeText(event->shape));
  size_t elements = 1;
  for (int64_t d : schema.shape) elements *= static_cast<size_t>(d);
  FUZZ_CHECK(event->features.size() == elements, "features of another count");
  for (float f : event->features) FUZZ_CHECK(std::isfinite(f), "a feature that is not finite");
  FUZZ_CHECK(event->label >= 0 && event->label < schema.classes, "a label out of range");
  FUZZ_CHECK(event->produced_ns >= 0, "a negative time");

  auto again = DecodeStreamEvent({entry.id, EncodeStreamEvent(*event)}, schema);
  FUZZ_CHECK(again.ok(), again.status().ToString());
  FUZZ_CHECK(again->features.size() == event->features.size() &&
                 std::memcmp(again->features.data(), event->features.data(),
                             event->features.size() * 4) == 0,
             "the features changed on encoding again");
  FUZZ_CHECK(again->label == event->label && again->produced_ns == event->produced_ns &&
                 again->seq == event->seq && again->shape == event->shape,
             "a field changed on encoding again");
}

}  // namespace
}  // namespace strata

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const strata::StreamEntry entry =
      strata::fuzz::EntryOfBytes(absl::string_view(reinterpret_cast<const char*>(data), size));
  strata::DecodeAndCheck(entry, {{2, 2}, 10});
  strata::DecodeAndCheck(entry, {{1, 28, 28}, 10});
  return 0;
}
