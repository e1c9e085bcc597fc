#include "services/common/stream/stream_event.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include <absl/strings/escaping.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>

namespace strata {
namespace {

constexpr size_t kMaxDims = 8;
// More than a few fields is not an event of ours; it also bounds the work a hostile entry costs.
constexpr size_t kMaxFields = 16;

// The entry id as a message may quote it: escaped and cut, so a hostile id stays one short line.
std::string QuotedId(const std::string& id) {
  std::string quoted = absl::CEscape(id.substr(0, 64));
  if (id.size() > 64) quoted += "...";
  return quoted;
}

// A plain decimal: an optional '-', then 1 to 19 digits, nothing else (no '+', spaces or
// leading zeros past the first digit of "0"), within [min, max].
std::optional<int64_t> PlainDecimal(const std::string& text, int64_t min, int64_t max) {
  size_t i = 0;
  const bool negative = !text.empty() && text[0] == '-';
  if (negative) i = 1;
  const size_t digits = text.size() - i;
  if (digits == 0 || digits > 19 || (digits > 1 && text[i] == '0')) return std::nullopt;
  uint64_t value = 0;
  for (; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(text[i] - '0');
  }
  // 19 digits fit in uint64_t; past int64's range is out of range either way.
  if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  const int64_t signed_value =
      negative ? -static_cast<int64_t>(value) : static_cast<int64_t>(value);
  if (signed_value < min || signed_value > max) return std::nullopt;
  return signed_value;
}

float FloatFromLittleEndian(const char* p) {
  const uint32_t bits = static_cast<uint32_t>(static_cast<unsigned char>(p[0])) |
                        static_cast<uint32_t>(static_cast<unsigned char>(p[1])) << 8 |
                        static_cast<uint32_t>(static_cast<unsigned char>(p[2])) << 16 |
                        static_cast<uint32_t>(static_cast<unsigned char>(p[3])) << 24;
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

void AppendLittleEndian(float value, std::string* out) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  for (int shift = 0; shift < 32; shift += 8) out->push_back(static_cast<char>(bits >> shift));
}

}  // namespace

std::string ShapeText(const std::vector<int64_t>& shape) { return absl::StrJoin(shape, ","); }

StreamFields EncodeStreamEvent(const StreamEvent& event) {
  std::string x;
  x.reserve(event.features.size() * 4);
  for (float f : event.features) AppendLittleEndian(f, &x);
  StreamFields fields = {{"x", std::move(x)},
                         {"shape", ShapeText(event.shape)},
                         {"y", absl::StrCat(event.label)},
                         {"t", absl::StrCat(event.produced_ns)}};
  if (event.seq >= 0) fields.emplace_back("seq", absl::StrCat(event.seq));
  return fields;
}

absl::StatusOr<StreamEvent> DecodeStreamEvent(const StreamEntry& entry, const EventSchema& schema) {
  auto refuse = [&entry](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("stream entry ", QuotedId(entry.id), ": ", why));
  };
  if (entry.fields.size() > kMaxFields) {
    return refuse(absl::StrCat(entry.fields.size(), " fields, an event has at most 5"));
  }
  const std::string* x = nullptr;
  const std::string* shape = nullptr;
  const std::string* y = nullptr;
  const std::string* t = nullptr;
  const std::string* seq = nullptr;
  for (const auto& [name, value] : entry.fields) {
    const std::string** slot = name == "x"       ? &x
                               : name == "shape" ? &shape
                               : name == "y"     ? &y
                               : name == "t"     ? &t
                               : name == "seq"   ? &seq
                                                 : nullptr;
    if (slot == nullptr) {
      return refuse(absl::StrCat("unknown field '", absl::CEscape(name.substr(0, 32)),
                                 "' (an event has x, shape, y, t and seq)"));
    }
    if (*slot != nullptr) return refuse(absl::StrCat("field '", name, "' given twice"));
    *slot = &value;
  }
  const std::pair<const char*, const std::string*> required[] = {
      {"x", x}, {"shape", shape}, {"y", y}, {"t", t}};
  for (const auto& [name, value] : required) {
    if (value == nullptr) return refuse(absl::StrCat("no field '", name, "'"));
  }

  StreamEvent event;
  if (shape->empty() || shape->size() > 200) return refuse("the shape field is empty or too long");
  int64_t elements = 1;
  for (absl::string_view dim : absl::StrSplit(*shape, ',')) {
    const std::optional<int64_t> d = PlainDecimal(std::string(dim), 1, int64_t{1} << 30);
    if (!d || event.shape.size() == kMaxDims) {
      return refuse(absl::StrCat("shape '", absl::CEscape(*shape),
                                 "' is not 1 to 8 positive decimal dimensions joined by ','"));
    }
    event.shape.push_back(*d);
    // Each dimension is at most 2^30 and the product is checked against the shape the job takes
    // below, so it cannot overflow before it is compared: stop multiplying once it is too large.
    if (elements <= (int64_t{1} << 32)) elements *= *d;
  }
  if (event.shape != schema.shape) {
    return refuse(absl::StrCat("shape ", ShapeText(event.shape), ", the job's model takes ",
                               ShapeText(schema.shape)));
  }
  if (x->size() != static_cast<size_t>(elements) * 4) {
    return refuse(absl::StrCat("field 'x' holds ", x->size(), " bytes, shape ",
                               ShapeText(event.shape), " needs ", elements * 4,
                               " (little-endian float32)"));
  }
  const std::optional<int64_t> label =
      PlainDecimal(*y, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
  if (!label)
    return refuse(
        absl::StrCat("label '", absl::CEscape(y->substr(0, 32)), "' is not a decimal integer"));
  if (*label < 0 || *label >= schema.classes) {
    return refuse(absl::StrCat("label ", *label, " is outside [0, ", schema.classes, ")"));
  }
  event.label = static_cast<int32_t>(*label);
  const std::optional<int64_t> produced = PlainDecimal(*t, 0, std::numeric_limits<int64_t>::max());
  if (!produced) {
    return refuse(absl::StrCat("time '", absl::CEscape(t->substr(0, 32)),
                               "' is not nanoseconds since the epoch (a decimal >= 0)"));
  }
  event.produced_ns = *produced;
  if (seq != nullptr) {
    const std::optional<int64_t> number =
        PlainDecimal(*seq, 0, std::numeric_limits<int64_t>::max());
    if (!number)
      return refuse(
          absl::StrCat("seq '", absl::CEscape(seq->substr(0, 32)), "' is not a decimal >= 0"));
    event.seq = *number;
  }
  event.features.resize(static_cast<size_t>(elements));
  for (int64_t i = 0; i < elements; ++i) {
    const float v = FloatFromLittleEndian(x->data() + i * 4);
    if (!std::isfinite(v)) {
      return refuse(absl::StrCat("feature ", i, " is ", std::isnan(v) ? "NaN" : "infinite"));
    }
    event.features[static_cast<size_t>(i)] = v;
  }
  return event;
}

}  // namespace strata
