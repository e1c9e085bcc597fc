// One training example as an entry of a Redis stream, and the checks an entry passes before it
// may reach a model (docs/protocol.md, "Stream events"). An entry is a list of field/value pairs:
//
//   x      the features: little-endian float32, row-major, nothing else (4 bytes a feature)
//   shape  the features' shape as decimal dimensions joined by ',' ("1,28,28")
//   y      the class label, decimal
//   t      when the producer made the event: nanoseconds since the Unix epoch, decimal
//   seq    optional: the producer's event number, decimal (duplicates after a retried XADD show)
//
// Raw floats rather than the tensor wire format: a Fashion-MNIST event is 3,136 bytes of features
// plus about 30 of fields, the same five field names in every entry (Redis stores them once per
// node of the stream), and decoding is a size check and a copy. A decoder of untrusted bytes:
// every refusal is an InvalidArgument naming the entry id, and no input crashes it (a fuzz
// target, tests/fuzz/stream_event_fuzz.cc, holds it to that).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <absl/status/statusor.h>

namespace strata {

// A stream entry as the broker hands it out: its id ("1700000000000-0") and fields in order.
using StreamFields = std::vector<std::pair<std::string, std::string>>;
struct StreamEntry {
  std::string id;
  StreamFields fields;
};

struct StreamEvent {
  std::vector<int64_t> shape;  // one example's, without a batch dimension
  std::vector<float> features;
  int32_t label = 0;
  int64_t produced_ns = 0;
  int64_t seq = -1;  // -1: the entry had none
};

// What the job's model takes: an event of another shape, or a label outside [0, classes), is
// refused.
struct EventSchema {
  std::vector<int64_t> shape;
  int32_t classes = 0;
};

// The fields of `event`, in the order above (`seq` left out when it is negative).
StreamFields EncodeStreamEvent(const StreamEvent& event);

// The event `entry` holds, or InvalidArgument "stream entry ID: what is wrong" when a field is
// missing, repeated or unknown, a number is not a plain decimal in range, the shape is not
// `schema`'s, `x` holds another number of bytes than the shape needs, a feature is NaN or
// infinite, or the label is outside [0, schema.classes).
absl::StatusOr<StreamEvent> DecodeStreamEvent(const StreamEntry& entry, const EventSchema& schema);

// "1,28,28": the `shape` field's text.
std::string ShapeText(const std::vector<int64_t>& shape);

}  // namespace strata
