// What the data-plane tests (the ring's, the gradient mesh's) ask of a raw TCP connection they
// opened as a hostile caller would: whether the receiver cut it off.
#pragma once

#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstdint>

namespace strata::testing {

// True once the receiver has closed the connection (end of stream or a reset) within 60 s; false
// if a byte came instead (nothing was asked for) or the time passed.
inline bool ClosedByReceiver(int fd) {
  timeval limit{60, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  uint8_t byte;
  for (;;) {
    const ssize_t n = recv(fd, &byte, 1, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

}  // namespace strata::testing
