// A memory region two processes of one host share, for the parameter server's push/pull when a
// worker and its server turn out to run on the same machine (strategy.ps_link: shm). Over
// loopback TCP each tensor byte is copied into the kernel and out again; through a shared region
// the push is one copy into it and one out, and the socket carries only the headers.
//
// The server creates the region: an anonymous memfd, sized once and sealed against growing and
// shrinking (so that the other side cannot make its accesses fault), with 32 random bytes at its
// start. It offers the worker, over the ticketed connection, the name of a fresh abstract Unix
// socket, the size and those bytes. The worker connects to that socket, which exists only in the
// server's network namespace (in another container, pod or machine it names nothing), and
// presents the 32 bytes; the server then hands it the memfd (SCM_RIGHTS) and closes both the
// socket and its own descriptor, and the worker closes its descriptor once it has mapped it. From
// then on the region is reachable only through the two mappings: not through /proc/PID/fd of
// either process, where any process of the same user could open it (Yama's ptrace_scope, the
// default on Ubuntu, keeps such a process from writing the server's memory, not from opening its
// descriptors), and no other worker of the server can open it.
//
// The region is still shared with its worker while the server reads a push from it, so the
// server copies the push out in the same pass that checks it and applies only the copy
// (tcp_push_pull_server.cc): what it applies is what it checked.
//
// Layout: a 4 KiB page holding the 32 bytes, then the push area, then the reply area, each of
// `area_bytes` rounded up to whole pages.
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include <absl/status/status.h>
#include <absl/status/statusor.h>

namespace strata {

struct SharedRegionOffer {
  uint64_t socket_id = 0;  // the abstract Unix socket "strata-region-<16 hex digits>"
  uint64_t region_bytes = 0;
  std::array<uint8_t, 32> nonce{};
};

class SharedRegion {
 public:
  // A new region whose two areas hold `area_bytes` each (at most 1 GiB), and the socket its
  // descriptor will be handed over on.
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Create(size_t area_bytes);
  // The creator, after sending the offer: waits until the worker holding it has taken the
  // descriptor, then closes this process's descriptor and the socket. Gives up (false) when
  // `abandon_fd` becomes readable (the worker went on without attaching: its next request) or
  // after `timeout`. A connection without the offer's bytes is closed and waiting goes on.
  bool HandOver(int abandon_fd, std::chrono::milliseconds timeout);
  // The region an offer names, taken over its socket, if this process can reach it and it is
  // the one offered; the error says why not (not the same host or network namespace, another
  // file, another size).
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

  int fd_;              // the memfd until it is handed over (creator) or mapped (worker): then -1
  int listen_fd_ = -1;  // the creator's hand-over socket until HandOver
  uint8_t* const base_;
  const size_t area_bytes_;
  SharedRegionOffer offer_;
};

}  // namespace strata
