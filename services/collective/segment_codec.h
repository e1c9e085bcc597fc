// The RingSegment message (proto/strata/v1/collective.proto) as gRPC byte buffers, written and
// read without the generated protobuf class so that a payload is never copied: a sent segment's
// floats are lent to gRPC straight from the caller's buffer, and a received one is read where gRPC
// put it. The encoding is ordinary protobuf (fixed-width header fields, then `data` or `abort`),
// so any protobuf client can read it; the parser accepts any field order and skips unknown fields.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <absl/status/status.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include "services/collective/ring_link.h"

namespace strata {

// Counts the payload slices that gRPC still holds. Segments are sent straight from the caller's
// buffer (no copy: on a loaded machine the copy cost ~10% of an operation's CPU), so an operation
// may return only when gRPC has let go of every one of them; the ledger tells it when.
class LoanLedger {
 public:
  // A slice over data[0..bytes) that gRPC reads when it writes the message; counted until gRPC
  // releases it. `self` keeps the ledger alive until then.
  static grpc::Slice Lend(const std::shared_ptr<LoanLedger>& self, const void* data, size_t bytes);

  // True when every lent slice is back; false if some are still out at `until`.
  bool WaitAllReturned(RingClock::time_point until);

 private:
  static void Return(void* owner);

  std::mutex mu_;
  std::condition_variable cv_;
  int outstanding_ = 0;
};

// One message: the header fields in a small slice of their own, then data[0..floats) lent through
// `ledger`.
grpc::ByteBuffer EncodeSegment(const SegmentHeader& header, const float* data, size_t floats,
                               const std::shared_ptr<LoanLedger>& ledger);
// One message carrying `reason` (copied) instead of data.
grpc::ByteBuffer EncodeAbort(const SegmentHeader& header, const std::string& reason);

// A received message; `slices` own the bytes, and the payload is data_bytes from data_pos of
// slices[data_slice] on.
struct ParsedSegment {
  SegmentHeader header;
  std::string abort;
  std::vector<grpc::Slice> slices;
  size_t data_slice = 0, data_pos = 0, data_bytes = 0;
  bool has_data = false;
};

// Takes the message's slices (the buffer keeps references; nothing is copied) and reads them.
absl::Status ParseSegment(const grpc::ByteBuffer& buffer, ParsedSegment* segment);

// Well-formed UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF): what protobuf's
// parser demands of a `string` field. An abort reason that is not would travel on as the ring's
// error into the worker's status, which the orchestrator's protobuf parser then refuses, losing
// the status (found by tests/fuzz/segment_codec_fuzz.cc); both links refuse such a reason.
bool IsValidUtf8(const std::string& s);

// Fills `out` from `segment`, its pieces pointing into segment.slices (which must outlive them).
void ExposeSegment(ParsedSegment* segment, RingSegment* out);

}  // namespace strata
