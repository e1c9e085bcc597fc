// What the two network links (grpc_ring_link.cc, tcp_ring_link.cc) share about an operation's
// inbox, the segments received from the previous rank in send order: how RingLink's Receive waits
// on it, how ReceiveAbort takes the previous rank's later aborts out of it after a failure, and
// what SendError says. (How an operation ends while its buffers are lent: lent_buffers.h.)
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

#include <absl/status/status.h>

#include "services/collective/ring_link.h"

namespace strata {

// `inbox` has `segments` and `ended`, guarded by the mutex `lock` holds, which `cv` is notified
// under. Waits until the inbox has a segment (kSegment: the caller takes it), the sending side
// failed (`send_failed()`, called under the lock), the sender's stream ended, or `until` passed,
// and says which, in that order.
template <typename Inbox, typename SendFailed>
RingLink::Operation::Received WaitForSegment(std::unique_lock<std::mutex>& lock,
                                             std::condition_variable& cv, Inbox& inbox,
                                             RingClock::time_point until,
                                             const SendFailed& send_failed) {
  using Received = RingLink::Operation::Received;
  while (true) {
    if (!inbox.segments.empty()) return Received::kSegment;
    if (send_failed()) return Received::kSendFailed;
    if (inbox.ended) return Received::kPreviousEnded;
    if (cv.wait_until(lock, until) == std::cv_status::timeout && inbox.segments.empty() &&
        !inbox.ended && !send_failed()) {
      return Received::kTimedOut;
    }
  }
}

// `inbox` has `segments` (a sequence of elements with an `abort` string) and `ended`, and is
// guarded by the mutex `lock` holds, which `cv` is notified under. Skips data segments; takes
// the next abort into *reason. False once the sender's stream has ended or `until` passed.
template <typename Inbox>
bool TakeNextAbort(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, Inbox& inbox,
                   RingClock::time_point until, std::string* reason) {
  bool timed_out = false;
  while (true) {
    for (auto it = inbox.segments.begin(); it != inbox.segments.end(); ++it) {
      if (it->abort.empty()) continue;
      *reason = std::move(it->abort);
      inbox.segments.erase(it);
      return true;
    }
    if (inbox.ended || timed_out) return false;
    timed_out = cv.wait_until(lock, until) == std::cv_status::timeout;
  }
}

// RingLink::Operation::ReceiveAbort of operation `operation`, whose inbox is inboxes[operation]
// (a map by operation, guarded by `mu`, which `cv` is notified under).
template <typename Inboxes>
bool ReceiveAbortFrom(std::mutex& mu, std::condition_variable& cv, Inboxes& inboxes,
                      uint64_t operation, RingClock::time_point until, std::string* reason) {
  std::unique_lock<std::mutex> lock(mu);
  return TakeNextAbort(lock, cv, inboxes[operation], until, reason);
}

// RingLink::Operation::SendError: the transport's reason, or `unknown` (UNAVAILABLE) when it
// gave none.
inline absl::Status SendErrorOr(const absl::Status& reason, const char* unknown) {
  return reason.ok() ? absl::UnavailableError(unknown) : reason;
}

}  // namespace strata
