// The stream event codec (services/common/stream/stream_event.h). Every malformed kind of entry is
// refused with the entry's id in the message. With the NaN check removed from DecodeStreamEvent on
// purpose, RefusesEveryMalformedKindNamingTheEntry failed at "a NaN feature": the entry decoded.
#include <cmath>
#include <cstring>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/common/stream/stream_event.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

const EventSchema kSchema = {{1, 2, 3}, 10};

StreamEvent Example() {
  StreamEvent e;
  e.shape = {1, 2, 3};
  e.features = {0.f, -1.5f, 2.25f, 1e-30f, 3.f, -0.f};
  e.label = 7;
  e.produced_ns = 1764300000123456789;
  e.seq = 42;
  return e;
}

StreamEntry Entry(StreamFields fields) { return {"1764300000123-7", std::move(fields)}; }

std::string& Field(StreamFields& fields, const std::string& name) {
  for (auto& [n, v] : fields) {
    if (n == name) return v;
  }
  ADD_FAILURE() << "no field " << name;
  static std::string none;
  return none;
}

TEST(StreamEvent, RoundTripsEveryFieldBitForBit) {
  const StreamEvent e = Example();
  StreamFields fields = EncodeStreamEvent(e);
  EXPECT_EQ(Field(fields, "x").size(), 6u * 4);
  EXPECT_EQ(Field(fields, "shape"), "1,2,3");
  EXPECT_EQ(Field(fields, "y"), "7");
  auto back = DecodeStreamEvent(Entry(fields), kSchema);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->shape, e.shape);
  ASSERT_EQ(back->features.size(), e.features.size());
  EXPECT_EQ(std::memcmp(back->features.data(), e.features.data(), 24), 0);  // -0.f too
  EXPECT_EQ(back->label, 7);
  EXPECT_EQ(back->produced_ns, e.produced_ns);
  EXPECT_EQ(back->seq, 42);
  // Little-endian on the wire whatever the host: 2.25f is 0x40100000.
  EXPECT_EQ(Field(fields, "x").substr(8, 4), std::string("\x00\x00\x10\x40", 4));
}

TEST(StreamEvent, SeqIsOptional) {
  StreamEvent e = Example();
  e.seq = -1;
  StreamFields fields = EncodeStreamEvent(e);
  EXPECT_EQ(fields.size(), 4u);
  auto back = DecodeStreamEvent(Entry(fields), kSchema);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->seq, -1);
}

TEST(StreamEvent, RefusesEveryMalformedKindNamingTheEntry) {
  struct Case {
    const char* what;
    void (*mutate)(StreamFields&);
    const char* expect;
  } cases[] = {
      {"x too short", [](StreamFields& f) { Field(f, "x").resize(20); },
       "field 'x' holds 20 bytes, shape 1,2,3 needs 24"},
      {"x too long", [](StreamFields& f) { Field(f, "x") += "abcd"; }, "holds 28 bytes"},
      {"another shape", [](StreamFields& f) { Field(f, "shape") = "1,3,2"; },
       "shape 1,3,2, the job's model takes 1,2,3"},
      {"a shape of garbage", [](StreamFields& f) { Field(f, "shape") = "1,,3"; },
       "is not 1 to 8 positive decimal dimensions"},
      {"a zero dimension", [](StreamFields& f) { Field(f, "shape") = "0,2,3"; }, "positive"},
      {"nine dimensions", [](StreamFields& f) { Field(f, "shape") = "1,1,1,1,1,1,1,1,1"; },
       "1 to 8"},
      {"a NaN feature",
       [](StreamFields& f) {
         const float nan = std::numeric_limits<float>::quiet_NaN();
         std::memcpy(&Field(f, "x")[12], &nan, 4);
       },
       "feature 3 is NaN"},
      {"an infinite feature",
       [](StreamFields& f) {
         const float inf = -std::numeric_limits<float>::infinity();
         std::memcpy(&Field(f, "x")[20], &inf, 4);
       },
       "feature 5 is infinite"},
      {"a label too large", [](StreamFields& f) { Field(f, "y") = "10"; },
       "label 10 is outside [0, 10)"},
      {"a negative label", [](StreamFields& f) { Field(f, "y") = "-1"; }, "label -1 is outside"},
      {"a label of text", [](StreamFields& f) { Field(f, "y") = " 3"; }, "is not a decimal"},
      {"a label past int32", [](StreamFields& f) { Field(f, "y") = "4294967296"; },
       "is not a decimal"},
      {"a time of text", [](StreamFields& f) { Field(f, "t") = "yesterday"; }, "time 'yesterday'"},
      {"a negative time", [](StreamFields& f) { Field(f, "t") = "-5"; }, "time '-5'"},
      {"a bad seq", [](StreamFields& f) { Field(f, "seq") = "+1"; }, "seq '+1'"},
      {"no x", [](StreamFields& f) { f.erase(f.begin()); }, "no field 'x'"},
      {"no shape", [](StreamFields& f) { f.erase(f.begin() + 1); }, "no field 'shape'"},
      {"no y", [](StreamFields& f) { f.erase(f.begin() + 2); }, "no field 'y'"},
      {"no t", [](StreamFields& f) { f.erase(f.begin() + 3); }, "no field 't'"},
      {"a field twice", [](StreamFields& f) { f.emplace_back("y", "1"); }, "'y' given twice"},
      {"an unknown field", [](StreamFields& f) { f.emplace_back("label", "1"); },
       "unknown field 'label'"},
      {"no fields at all", [](StreamFields& f) { f.clear(); }, "no field 'x'"},
  };
  for (const Case& c : cases) {
    StreamFields fields = EncodeStreamEvent(Example());
    c.mutate(fields);
    auto decoded = DecodeStreamEvent(Entry(fields), kSchema);
    ASSERT_FALSE(decoded.ok()) << c.what;
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(std::string(decoded.status().message()),
                HasSubstr("stream entry 1764300000123-7: "))
        << c.what;
    EXPECT_THAT(std::string(decoded.status().message()), HasSubstr(c.expect)) << c.what;
  }
}

TEST(StreamEvent, AHostileIdStaysOneShortLine) {
  StreamEntry entry{std::string("evil\nid\0", 8) + std::string(500, 'x'), {}};
  auto decoded = DecodeStreamEvent(entry, kSchema);
  ASSERT_FALSE(decoded.ok());
  const std::string message(decoded.status().message());
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_LT(message.size(), 200u) << message;
}

}  // namespace
}  // namespace strata
