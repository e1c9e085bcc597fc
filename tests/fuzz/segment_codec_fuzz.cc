// The ring's segment codec (services/collective/segment_codec.h): the parser every worker runs on
// the bytes its ring predecessor (or any client of Collective.Ring) sends, reading them across the
// slices gRPC received them in.
//
// The input: one byte n (taken modulo 8), n cut points of one byte each, then the message; the
// message is cut into slices there, so fields and floats straddle slice boundaries. Checked:
//   - the parse does not depend on how the message was sliced;
//   - the exposed payload pieces lie inside the slices and add up to the declared byte count;
//   - a parsed segment encodes again (EncodeSegment / EncodeAbort) to a message that protobuf's
//     own RingSegment parser and ParseSegment both read back to the same header and payload.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <absl/strings/str_cat.h>
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/support/byte_buffer.h>

#include "services/collective/segment_codec.h"
#include "strata/v1/collective.pb.h"
#include "tests/fuzz/fuzz_check.h"

namespace strata {
namespace {

grpc::ByteBuffer Buffer(const std::vector<std::string>& pieces) {
  std::vector<grpc::Slice> slices;
  for (const std::string& p : pieces) slices.emplace_back(p);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  FUZZ_CHECK(buffer.Dump(&slices).ok(), "Dump");
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

bool SameHeader(const SegmentHeader& a, const SegmentHeader& b) {
  return a.operation == b.operation && a.sender == b.sender && a.world == b.world &&
         a.count == b.count && a.step == b.step && a.offset == b.offset;
}

// The payload of a parsed segment, through the pieces ExposeSegment hands the ring.
std::string Payload(ParsedSegment* parsed, RingSegment* out) {
  ExposeSegment(parsed, out);
  std::string payload;
  for (const auto& piece : out->pieces) {
    payload.append(reinterpret_cast<const char*>(piece.data()), piece.size());
  }
  FUZZ_CHECK(payload.size() == out->data_bytes,
             absl::StrCat(payload.size(), " payload bytes exposed of ", out->data_bytes));
  return payload;
}

void CheckReencoding(const RingSegment& segment, const std::string& payload) {
  grpc::ByteBuffer encoded;
  std::vector<float> floats(payload.size() / sizeof(float));
  if (!segment.abort.empty() || !segment.has_data) {
    encoded = EncodeAbort(segment.header, segment.abort);
  } else {
    if (!floats.empty()) std::memcpy(floats.data(), payload.data(), floats.size() * sizeof(float));
    encoded =
        EncodeSegment(segment.header, floats.data(), floats.size(), std::make_shared<LoanLedger>());
  }
  const std::string bytes = Flatten(encoded);
  v1::RingSegment proto;
  FUZZ_CHECK(proto.ParseFromString(bytes), "protobuf refuses an encoded segment");
  FUZZ_CHECK(proto.operation() == segment.header.operation &&
                 proto.sender() == segment.header.sender && proto.world() == segment.header.world &&
                 proto.count() == segment.header.count && proto.step() == segment.header.step &&
                 proto.offset() == segment.header.offset,
             "protobuf reads another header");
  ParsedSegment back;
  FUZZ_CHECK(ParseSegment(encoded, &back).ok(), "an encoded segment does not parse");
  FUZZ_CHECK(SameHeader(back.header, segment.header), "the header changed on a round trip");
  RingSegment exposed;
  const std::string payload_back = Payload(&back, &exposed);
  if (!segment.abort.empty() || !segment.has_data) {
    FUZZ_CHECK(proto.abort() == segment.abort && exposed.abort == segment.abort, "abort changed");
  } else {
    const std::string sent(reinterpret_cast<const char*>(floats.data()),
                           floats.size() * sizeof(float));
    FUZZ_CHECK(proto.data() == sent && payload_back == sent, "payload changed");
  }
}

}  // namespace
}  // namespace strata

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // its complaints about bad input are expected here
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  if (size < 1) return 0;
  const size_t cuts = std::min<size_t>(data[0] % 8, size - 1);
  const uint8_t* message = data + 1 + cuts;
  const size_t length = size - 1 - cuts;
  std::vector<size_t> at;
  for (size_t i = 0; i < cuts; ++i) at.push_back(length == 0 ? 0 : data[1 + i] % (length + 1));
  std::sort(at.begin(), at.end());
  std::vector<std::string> pieces;
  size_t from = 0;
  for (size_t cut : at) {
    pieces.emplace_back(reinterpret_cast<const char*>(message) + from, cut - from);
    from = cut;
  }
  pieces.emplace_back(reinterpret_cast<const char*>(message) + from, length - from);

  ParsedSegment sliced;
  const absl::Status status = ParseSegment(Buffer(pieces), &sliced);
  ParsedSegment whole;
  const absl::Status whole_status =
      ParseSegment(Buffer({std::string(reinterpret_cast<const char*>(message), length)}), &whole);
  FUZZ_CHECK(status.ok() == whole_status.ok(), "the slicing changed the verdict");
  if (!status.ok()) return 0;
  FUZZ_CHECK(SameHeader(sliced.header, whole.header), "the slicing changed the header");
  RingSegment a, b;
  const std::string payload = Payload(&sliced, &a);
  FUZZ_CHECK(payload == Payload(&whole, &b), "the slicing changed the payload");
  FUZZ_CHECK(a.abort == b.abort && a.has_data == b.has_data, "the slicing changed the abort");
  CheckReencoding(a, payload);
  return 0;
}
