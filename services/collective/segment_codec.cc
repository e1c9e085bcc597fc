#include "services/collective/segment_codec.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "services/collective/tsan_handoff.h"

namespace strata {
namespace {

// RingSegment field numbers and protobuf wire types.
enum : uint32_t {
  kOperation = 1,
  kSender = 2,
  kWorld = 3,
  kCount = 4,
  kStep = 5,
  kOffset = 6,
  kData = 7,
  kAbort = 8
};
enum : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

uint8_t* PutVarint(uint64_t v, uint8_t* p) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}
uint8_t* PutFixed64(uint32_t field, uint64_t v, uint8_t* p) {
  p = PutVarint(field << 3 | kFixed64, p);
  std::memcpy(p, &v, 8);  // x86/ARM little-endian, as protobuf's fixed64
  return p + 8;
}
uint8_t* PutFixed32(uint32_t field, uint32_t v, uint8_t* p) {
  p = PutVarint(field << 3 | kFixed32, p);
  std::memcpy(p, &v, 4);
  return p + 4;
}

// The header fields and the tag and length of the payload field; returns the bytes written.
size_t PutHead(const SegmentHeader& h, uint32_t payload_field, size_t payload_bytes,
               uint8_t (&head)[80]) {
  uint8_t* p = head;
  p = PutFixed64(kOperation, h.operation, p);
  p = PutFixed32(kSender, h.sender, p);
  p = PutFixed32(kWorld, h.world, p);
  p = PutFixed64(kCount, h.count, p);
  p = PutFixed32(kStep, h.step, p);
  p = PutFixed64(kOffset, h.offset, p);
  p = PutVarint(payload_field << 3 | kLengthDelimited, p);
  p = PutVarint(payload_bytes, p);
  return static_cast<size_t>(p - head);
}

// Reads bytes across the slices of a received message.
class SliceCursor {
 public:
  explicit SliceCursor(const std::vector<grpc::Slice>& slices) : slices_(slices) { Settle(); }
  bool AtEnd() const { return i_ == slices_.size(); }
  size_t slice() const { return i_; }
  size_t pos() const { return p_; }
  bool Read(void* out, size_t n) {
    auto* o = static_cast<uint8_t*>(out);
    while (n > 0) {
      if (AtEnd()) return false;
      const size_t take = std::min(n, slices_[i_].size() - p_);
      std::memcpy(o, slices_[i_].begin() + p_, take);
      o += take;
      n -= take;
      p_ += take;
      Settle();
    }
    return true;
  }
  bool Skip(size_t n) {
    while (n > 0) {
      if (AtEnd()) return false;
      const size_t take = std::min(n, slices_[i_].size() - p_);
      n -= take;
      p_ += take;
      Settle();
    }
    return true;
  }
  bool ReadVarint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!Read(&b, 1)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }

 private:
  void Settle() {
    while (i_ < slices_.size() && p_ == slices_[i_].size()) {
      ++i_;
      p_ = 0;
    }
  }
  const std::vector<grpc::Slice>& slices_;
  size_t i_ = 0, p_ = 0;
};

}  // namespace

grpc::Slice LoanLedger::Lend(const std::shared_ptr<LoanLedger>& self, const void* data,
                             size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(self->mu_);
    ++self->outstanding_;
  }
  auto* owner = new std::shared_ptr<LoanLedger>(self);
  TsanRelease(owner);  // Return runs on whichever gRPC thread drops the slice's last reference
  return grpc::Slice(const_cast<void*>(data), bytes, &LoanLedger::Return, owner);
}

bool LoanLedger::WaitAllReturned(RingClock::time_point until) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, until, [&] { return outstanding_ == 0; });
}

void LoanLedger::Return(void* owner) {
  TsanAcquire(owner);
  auto* ledger = static_cast<std::shared_ptr<LoanLedger>*>(owner);
  {
    std::lock_guard<std::mutex> lock((*ledger)->mu_);
    --(*ledger)->outstanding_;
  }
  (*ledger)->cv_.notify_all();
  delete ledger;
}

grpc::ByteBuffer EncodeSegment(const SegmentHeader& header, const float* data, size_t floats,
                               const std::shared_ptr<LoanLedger>& ledger) {
  uint8_t head[80];
  const size_t payload = floats * sizeof(float);
  grpc::Slice slices[2] = {grpc::Slice(head, PutHead(header, kData, payload, head)), grpc::Slice()};
  if (payload > 0) slices[1] = LoanLedger::Lend(ledger, data, payload);
  return grpc::ByteBuffer(slices, payload > 0 ? 2 : 1);
}

grpc::ByteBuffer EncodeAbort(const SegmentHeader& header, const std::string& reason) {
  uint8_t head[80];
  grpc::Slice slices[2] = {grpc::Slice(head, PutHead(header, kAbort, reason.size(), head)),
                           grpc::Slice(reason)};
  return grpc::ByteBuffer(slices, reason.empty() ? 1 : 2);
}

absl::Status ParseSegment(const grpc::ByteBuffer& buffer, ParsedSegment* seg) {
  grpc::Status dumped = buffer.Dump(&seg->slices);
  if (!dumped.ok()) return absl::InvalidArgumentError("unreadable ring segment");
  SliceCursor c(seg->slices);
  const auto bad = [] { return absl::InvalidArgumentError("malformed ring segment"); };
  while (!c.AtEnd()) {
    uint64_t tag;
    if (!c.ReadVarint(&tag)) return bad();
    const uint32_t field = static_cast<uint32_t>(tag >> 3), wire = static_cast<uint32_t>(tag & 7);
    if (wire == kVarint) {
      uint64_t ignored;
      if (!c.ReadVarint(&ignored)) return bad();
    } else if (wire == kFixed64) {
      uint64_t v;
      if (!c.Read(&v, 8)) return bad();
      if (field == kOperation) seg->header.operation = v;
      if (field == kCount) seg->header.count = v;
      if (field == kOffset) seg->header.offset = v;
    } else if (wire == kFixed32) {
      uint32_t v;
      if (!c.Read(&v, 4)) return bad();
      if (field == kSender) seg->header.sender = v;
      if (field == kWorld) seg->header.world = v;
      if (field == kStep) seg->header.step = v;
    } else if (wire == kLengthDelimited) {
      uint64_t len;
      if (!c.ReadVarint(&len)) return bad();
      if (field == kData) {
        seg->has_data = true;
        seg->data_slice = c.slice();
        seg->data_pos = c.pos();
        seg->data_bytes = len;
        if (!c.Skip(len)) return bad();
      } else if (field == kAbort) {
        if (len > (1 << 16)) return bad();
        seg->abort.resize(len);
        if (!c.Read(seg->abort.data(), len)) return bad();
        if (!IsValidUtf8(seg->abort)) {
          return absl::InvalidArgumentError("ring segment: the abort reason is not UTF-8");
        }
      } else if (!c.Skip(len)) {
        return bad();
      }
    } else {
      return bad();
    }
  }
  return absl::OkStatus();
}

void ExposeSegment(ParsedSegment* segment, RingSegment* out) {
  out->header = segment->header;
  out->abort = std::move(segment->abort);
  out->has_data = segment->has_data;
  out->data_bytes = segment->has_data ? segment->data_bytes : 0;
  out->pieces.clear();
  size_t left = out->data_bytes, pos = segment->data_pos;
  for (size_t i = segment->data_slice; left > 0; ++i, pos = 0) {
    const size_t take = std::min(left, segment->slices[i].size() - pos);
    out->pieces.emplace_back(segment->slices[i].begin() + pos, take);
    left -= take;
  }
}

bool IsValidUtf8(const std::string& s) {
  static constexpr uint32_t kMinimum[5] = {0, 0, 0x80, 0x800, 0x10000};  // by length
  size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<unsigned char>(s[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    // The lead byte gives the length and the code point's top bits.
    size_t length = 0;
    if ((lead & 0xE0) == 0xC0) length = 2;
    if ((lead & 0xF0) == 0xE0) length = 3;
    if ((lead & 0xF8) == 0xF0) length = 4;
    if (length == 0) return false;
    uint32_t code = lead & (0x7F >> length);
    if (s.size() - i < length) return false;
    for (size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(s[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      code = code << 6 | (next & 0x3F);
    }
    if (code < kMinimum[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
      return false;
    }
    i += length;
  }
  return true;
}

}  // namespace strata
