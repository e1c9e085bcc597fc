// The plain-TCP ring link's sending side (tcp_ring_link_impl.h): the writer thread, which dials
// the next rank's data plane when a connection is due (asking its gRPC service for the port and
// the ticket) and writes the queued frames straight from the caller's buffers, and the thread that
// reads the next rank's acks on that connection.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include <absl/strings/str_cat.h>

#include "services/collective/tcp_ring_link_impl.h"
#include "services/common/base/status.h"
#include "services/common/wire/half_float.h"
#include "services/common/wire/rpc.h"

namespace strata {
void TcpRingLink::Impl::WriterLoop() {
  std::unique_lock<std::mutex> lock(mu);
  while (true) {
    writer_cv.wait(lock, [&] { return stopping || !queue.empty(); });
    if (stopping) break;
    OutFrame frame = std::move(queue.front());
    queue.pop_front();
    if (frame.epoch != epoch || (broken && frame.epoch == epoch)) {
      ReturnFrame(frame);  // its connection is gone
      continue;
    }
    if (out_fd < 0 || connected_epoch != frame.epoch) {
      CloseConnection(lock);
      absl::Status dialled = Dial(lock, frame);
      if (stopping) break;
      if (!dialled.ok()) {
        MarkBroken(frame.epoch, std::move(dialled));
        ReturnFrame(frame);
        continue;
      }
    }
    const int fd = out_fd;
    const void* payload = frame.lent != nullptr ? static_cast<const void*>(frame.lent)
                                                : static_cast<const void*>(frame.owned.data());
    size_t bytes = frame.lent != nullptr ? frame.lent_bytes : frame.owned.size();
    lock.unlock();
    if (frame.half) {
      // Lent floats stay the caller's until the frame is returned; only this thread uses
      // half_out.
      const size_t floats = frame.lent_bytes / sizeof(float);
      half_out.resize(floats);
      FloatsToHalves(reinterpret_cast<const float*>(frame.lent), floats, half_out.data());
      payload = half_out.data();
      bytes = floats * sizeof(uint16_t);
    }
    absl::Status sent = tcp::SendAll(fd, frame.header, kFrameHeaderBytes, payload, bytes);
    lock.lock();
    if (!sent.ok()) MarkBroken(frame.epoch, std::move(sent));
    ReturnFrame(frame);
  }
  CloseConnection(lock);
  for (const OutFrame& frame : queue) ReturnFrame(frame);
  queue.clear();
}

// Asks the next rank's gRPC service for its data plane, connects and says hello. Unlocks `mu`
// while it waits; wait_for_ready retries a peer that is not up yet until the operation's end.
absl::Status TcpRingLink::Impl::Dial(std::unique_lock<std::mutex>& lock, const OutFrame& first) {
  const std::shared_ptr<v1::Collective::Stub> stub = next_stub;
  const std::string host = next_host;
  const uint32_t sender = static_cast<uint32_t>(rank);
  grpc::ClientContext context;
  // gRPC's deadlines are in the system clock.
  context.set_deadline(std::chrono::system_clock::now() + (first.until - Clock::now()));
  context.set_wait_for_ready(true);
  dialling = &context;
  lock.unlock();
  v1::DataPlaneRequest request;
  request.set_sender(sender);
  v1::DataPlaneOffer offer;
  absl::Status status =
      FromGrpcStatus(stub->DataPlane(&context, request, &offer), "asking for its data plane");
  int fd = -1;
  if (!status.ok()) {
  } else if (offer.port() == 0 || offer.port() > 65535 ||
             offer.ticket().size() != tcp::kTicketBytes) {
    status = absl::InvalidArgumentError(absl::StrCat("its data-plane offer is malformed (port ",
                                                     offer.port(), ", ticket of ",
                                                     offer.ticket().size(), " bytes)"));
  } else {
    const auto remaining =
        std::chrono::duration_cast<std::chrono::milliseconds>(first.until - Clock::now());
    absl::StatusOr<int> dialled = tcp::DialTcp(host, static_cast<int>(offer.port()),
                                               std::max(remaining, std::chrono::milliseconds(1)));
    if (dialled.ok()) {
      fd = *dialled;
      if (options.send_buffer_bytes > 0) {  // best effort: the kernel caps it, never fails it
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &options.send_buffer_bytes,
                   sizeof(options.send_buffer_bytes));
      }
      Ticket ticket;
      std::copy(offer.ticket().begin(), offer.ticket().end(), ticket.begin());
      uint8_t hello[tcp::kHelloBytes];
      tcp_ring::EncodeHello(ticket, sender, hello);
      status = tcp::SendAll(fd, hello, sizeof(hello), nullptr, 0);
    } else {
      status = dialled.status();
    }
  }
  lock.lock();
  dialling = nullptr;
  if (!status.ok() || stopping) {
    if (fd >= 0) close(fd);
    return status;
  }
  out_fd = fd;
  connected_epoch = first.epoch;
  acker = std::thread([this, fd, at = first.epoch] { AckLoop(fd, at); });
  return absl::OkStatus();
}

void TcpRingLink::Impl::CloseConnection(std::unique_lock<std::mutex>& lock) {
  if (out_fd < 0) return;
  shutdown(out_fd, SHUT_RDWR);
  std::thread reader = std::move(acker);
  lock.unlock();
  if (reader.joinable()) reader.join();
  lock.lock();
  close(out_fd);
  out_fd = -1;
}

void TcpRingLink::Impl::AckLoop(int fd, uint64_t at) {
  while (true) {
    uint8_t raw[kFrameHeaderBytes];
    Frame frame;
    absl::Status status = tcp::ReceiveExact(fd, raw, sizeof(raw));
    if (status.ok()) status = tcp_ring::DecodeFrame(raw, &frame);
    if (status.ok() && frame.kind != FrameKind::kAck) {
      status = absl::InvalidArgumentError("the next rank sent a frame that is not an ack");
    }
    std::lock_guard<std::mutex> lock(mu);
    if (!status.ok()) {
      if (absl::IsOutOfRange(status)) status = absl::UnavailableError("closed by the next rank");
      if (!stopping) MarkBroken(at, std::move(status));
      return;
    }
    if (frame.header.operation >= next_operation) acked.insert(frame.header.operation);
    cv.notify_all();
  }
}

}  // namespace strata
