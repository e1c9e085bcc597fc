// A memory region two processes of one host share, for the parameter server's push/pull when a
// worker and its server turn out to run on the same machine (strategy.ps_link: shm). Over
// loopback TCP each tensor byte is copied into the kernel and out again; through a shared region
// the push is one copy into it and one out, and the socket carries only the headers.
//
// The server creates the region: an anonymous memfd, sized once and sealed against growing and
// shrinking (so that nobody who opens it can make the other side's accesses fault), with 32
// random bytes at its start. It offers the worker its pid, the descriptor number, the size and
// those bytes over the ticketed connection. The worker opens /proc/PID/fd/FD, which names the
// server's memfd only if both run under one kernel and one pid namespace (in separate containers
// or on separate machines it names nothing, or something else), and maps it only if the size and
// the 32 bytes match; otherwise it keeps the tensors on the socket. Opening another process's
// descriptor takes the same rights as reading its memory, so a worker that can attach could
// already have read or written the server's memory: sharing the region grants nothing new. That
// is why the server checks and applies a push where it lies, without copying it out first.
//
// Layout: a 4 KiB page holding the 32 bytes, then the push area, then the reply area, each of
// `area_bytes` rounded up to whole pages.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include <absl/status/status.h>
#include <absl/status/statusor.h>

namespace strata {

struct SharedRegionOffer {
  uint32_t pid = 0;
  uint32_t fd = 0;
  uint64_t region_bytes = 0;
  std::array<uint8_t, 32> nonce{};
};

class SharedRegion {
 public:
  // A new region whose two areas hold `area_bytes` each (at most 1 GiB).
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Create(size_t area_bytes);
  // The region an offer names, if this process can reach it and it is the one offered; the error
  // says why not (not the same host, another pid namespace, another file, another size).
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Attach(const SharedRegionOffer& offer,
                                                              size_t area_bytes);
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  // What the creator hands to a worker; meaningful only on the creating side.
  const SharedRegionOffer& offer() const { return offer_; }
  size_t area_bytes() const { return area_bytes_; }
  // The worker writes its push here and the server reads it; the server writes the reply here
  // and the worker reads it. The request and the reply on the socket order the accesses.
  uint8_t* push_area() const { return base_ + kPageBytes; }
  uint8_t* reply_area() const { return push_area() + AreaSpan(area_bytes_); }

  static constexpr size_t kPageBytes = 4096;
  static constexpr size_t kMaxAreaBytes = size_t{1} << 30;
  static size_t AreaSpan(size_t area_bytes) {
    return (area_bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  }
  static size_t RegionBytes(size_t area_bytes) { return kPageBytes + 2 * AreaSpan(area_bytes); }

 private:
  SharedRegion(int fd, uint8_t* base, size_t area_bytes)
      : fd_(fd), base_(base), area_bytes_(area_bytes) {}

  const int fd_;
  uint8_t* const base_;
  const size_t area_bytes_;
  SharedRegionOffer offer_;
};

}  // namespace strata
