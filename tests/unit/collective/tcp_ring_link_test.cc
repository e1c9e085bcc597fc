// The ring's plain-TCP data plane against input that is not a ring peer's: its frame and hello
// codec on malformed headers, a caller without the ticket, and a caller with the ticket (it could
// call the rank's gRPC service) that lies in its frames. Each is cut off, and the ring goes on
// giving exact averages afterwards. The ring's own behaviour over this link (exact averages,
// identical replicas, dead and silent peers named within the deadline, re-forming) is in
// ring_allreduce_test.cc, which runs every test over "plain-tcp" too.
#include "services/collective/tcp_ring_link.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/collective/tcp_frame.h"
#include "services/common/wire/rpc.h"
#include "strata/v1/collective.grpc.pb.h"
#include "tests/support/data_plane_probe.h"
#include "tests/unit/collective/ring_test_support.h"

namespace strata {
namespace {

using ring_test::RunOnAll;
using testing::ClosedByReceiver;
using ring_test::StartRing;
using ring_test::TestRing;
using ring_test::Value;
using tcp_ring::Frame;
using tcp_ring::FrameKind;
using tcp_ring::kFrameHeaderBytes;
using ::testing::HasSubstr;

Frame DataFrame(uint64_t operation, uint64_t count, uint64_t offset, uint64_t bytes) {
  Frame f;
  f.kind = FrameKind::kData;
  f.header.operation = operation;
  f.header.sender = 1;
  f.header.world = 2;
  f.header.count = count;
  f.header.offset = offset;
  f.payload_bytes = bytes;
  return f;
}

absl::Status Decode(const Frame& f) {
  uint8_t raw[kFrameHeaderBytes];
  tcp_ring::EncodeFrame(f, raw);
  Frame back;
  return tcp_ring::DecodeFrame(raw, &back);
}

TEST(TcpFrame, HeadersRoundTripAndMalformedOnesAreRefused) {
  Frame f = DataFrame(7, 1000, 996, 16);
  f.header.step = 3;
  uint8_t raw[kFrameHeaderBytes];
  tcp_ring::EncodeFrame(f, raw);
  Frame back;
  ASSERT_TRUE(tcp_ring::DecodeFrame(raw, &back).ok());
  EXPECT_EQ(back.header.operation, 7u);
  EXPECT_EQ(back.header.step, 3u);
  EXPECT_EQ(back.header.offset, 996u);
  EXPECT_EQ(back.payload_bytes, 16u);

  raw[0] ^= 1;
  EXPECT_THAT(std::string(tcp_ring::DecodeFrame(raw, &back).message()), HasSubstr("bad magic"));
  tcp_ring::EncodeFrame(f, raw);
  raw[4] = 9;  // kind
  EXPECT_THAT(std::string(tcp_ring::DecodeFrame(raw, &back).message()), HasSubstr("unknown kind"));

  // Data that is not whole floats, lies outside the buffer it declares, or is over the bound.
  for (const Frame& bad : {DataFrame(0, 1000, 0, 6), DataFrame(0, 1000, 0, 0),
                           DataFrame(0, 1000, 997, 16), DataFrame(0, 1000, 2000, 4),
                           DataFrame(0, uint64_t{1} << 40, 0, tcp_ring::kMaxDataBytes + 4),
                           DataFrame(0, 4, ~uint64_t{0} - 1, 8)}) {
    absl::Status s = Decode(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
        << bad.payload_bytes << " bytes at " << bad.header.offset << " of " << bad.header.count;
  }
  Frame abort;
  abort.kind = FrameKind::kAbort;
  abort.payload_bytes = tcp_ring::kMaxAbortBytes + 1;
  EXPECT_EQ(Decode(abort).code(), absl::StatusCode::kInvalidArgument);
  Frame end;
  end.kind = FrameKind::kEnd;
  end.payload_bytes = 4;
  EXPECT_EQ(Decode(end).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TcpFrame, HelloCarriesTheTicketAndRefusesAnotherVersion) {
  auto ticket = tcp::RandomTicket();
  ASSERT_TRUE(ticket.ok());
  uint8_t raw[tcp::kHelloBytes];
  tcp_ring::EncodeHello(*ticket, 3, raw);
  tcp::Ticket back;
  uint32_t sender = 0;
  ASSERT_TRUE(tcp_ring::DecodeHello(raw, &back, &sender).ok());
  EXPECT_TRUE(tcp::SameTicket(back, *ticket));
  EXPECT_EQ(sender, 3u);
  back[31] ^= 1;
  EXPECT_FALSE(tcp::SameTicket(back, *ticket));
  raw[4] = 2;  // version
  EXPECT_THAT(std::string(tcp_ring::DecodeHello(raw, &back, &sender).message()),
              HasSubstr("version 2"));
}

TEST(TcpFrame, TheDataPlaneIsOnTheHostOfEveryAddressForm) {
  EXPECT_EQ(tcp::DataPlaneHost("127.0.0.1:5000"), "127.0.0.1");
  EXPECT_EQ(tcp::DataPlaneHost("worker-1.strata:7000"), "worker-1.strata");
  EXPECT_EQ(tcp::DataPlaneHost("dns:///worker-1:7000"), "worker-1");
  EXPECT_EQ(tcp::DataPlaneHost("[::1]:5000"), "::1");
  EXPECT_EQ(tcp::DataPlaneHost("0.0.0.0:0"), "0.0.0.0");
  EXPECT_EQ(tcp::DataPlaneHost("unix-abstract:strata-w1"), "127.0.0.1");
  EXPECT_EQ(tcp::DataPlaneHost("worker"), "worker");
}

// Two ranks on the TCP link, and a stranger's connection to rank 0's data plane.
class TcpRingInputTest : public ::testing::Test {
 protected:
  void SetUp() override { ring_ = StartRing(2, "plain-tcp"); }

  // A connection to rank 0's data plane, or -1.
  int Dial() {
    auto fd = tcp::DialTcp("127.0.0.1", ring_.ranks[0].tcp->data_port(), std::chrono::seconds(10));
    EXPECT_TRUE(fd.ok()) << fd.status();
    return fd.ok() ? *fd : -1;
  }
  // The ticket rank 0 hands out to a caller of its gRPC service (which carries the run token).
  tcp::Ticket AskForTicket() {
    auto stub = v1::Collective::NewStub(MakeChannel(ring_.ranks[0].address));
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(std::chrono::seconds(30)));
    v1::DataPlaneOffer offer;
    grpc::Status status = stub->DataPlane(&context, v1::DataPlaneRequest(), &offer);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(offer.port(), static_cast<uint32_t>(ring_.ranks[0].tcp->data_port()));
    tcp::Ticket ticket{};
    EXPECT_EQ(offer.ticket().size(), ticket.size());
    std::copy_n(offer.ticket().begin(), std::min(offer.ticket().size(), ticket.size()),
                ticket.begin());
    return ticket;
  }
  static void Send(int fd, const void* bytes, size_t n) {
    // The receiver may already have cut the connection: that is what the tests look for.
    (void)tcp::SendAll(fd, bytes, n, nullptr, 0);
  }
  static void SendFrame(int fd, const Frame& f, const std::string& payload = "") {
    uint8_t raw[kFrameHeaderBytes];
    tcp_ring::EncodeFrame(f, raw);
    Send(fd, raw, sizeof(raw));
    if (!payload.empty()) Send(fd, payload.data(), payload.size());
  }
  // The ring still averages exactly.
  void ExpectExactAverages(int op) {
    const size_t n = 5000;
    std::vector<std::vector<float>> data(2, std::vector<float>(n));
    for (int r = 0; r < 2; ++r) {
      for (size_t i = 0; i < n; ++i) data[r][i] = Value(r, i, op);
    }
    AllReduceOptions options;
    options.deadline = std::chrono::seconds(60);
    options.segment_bytes = 4096;
    auto statuses = RunOnAll(2, [&](int r) {
      return ring_.ranks[r].ring->AllReduceAverage(data[r].data(), n, options);
    });
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(data[r][i], (Value(0, i, op) + Value(1, i, op)) / 2.0f) << "rank " << r;
      }
    }
  }

  TestRing ring_;
};

// Anyone on the machine can connect to a rank's data port. Before: a connection without a
// hello took one of the 8 connection slots, and its 10 s to present the ticket were a receive
// timeout restarted by every byte. Against the old link, the hello trickled a byte every 5 s was
// never cut off (given up after 120 s), and with 20 strangers holding a byte each the ring's own
// connection was closed unread and its first operation failed. Now strangers wait apart, with
// one deadline for the whole hello, and the ring forms and averages exactly.
TEST_F(TcpRingInputTest, StrangersHoldingTheDataPortDoNotStopTheRing) {
  const int port = ring_.ranks[0].tcp->data_port();
  {
    auto fd = tcp::DialTcp("127.0.0.1", port, std::chrono::seconds(10));
    ASSERT_TRUE(fd.ok()) << fd.status();
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    bool closed = false;
    while (!closed && std::chrono::steady_clock::now() < give_up) {
      const uint8_t byte = 0x53;
      if (!tcp::SendAll(*fd, &byte, 1, nullptr, 0).ok()) break;
      pollfd p{*fd, POLLIN, 0};
      // Waits for the close (an event), or paces the next byte.
      if (poll(&p, 1, 5000) > 0) {
        char c;
        closed = recv(*fd, &c, 1, 0) <= 0;
      }
    }
    close(*fd);
    EXPECT_TRUE(closed) << "a hello sent a byte every 5 s was never cut off";
  }
  std::vector<int> strangers;
  for (int i = 0; i < 20; ++i) {
    const int fd = Dial();
    ASSERT_GE(fd, 0);
    Send(fd, "S", 1);
    strangers.push_back(fd);
  }
  ExpectExactAverages(0);
  ExpectExactAverages(1);
  for (int fd : strangers) close(fd);
}

TEST_F(TcpRingInputTest, AConnectionWithoutTheTicketIsClosedAndChangesNothing) {
  ExpectExactAverages(0);
  // A wrong ticket, then a data frame for the operation the ring is about to run.
  tcp::Ticket wrong{};
  uint8_t hello[tcp::kHelloBytes];
  tcp_ring::EncodeHello(wrong, 1, hello);
  const int fd = Dial();
  ASSERT_GE(fd, 0);
  Send(fd, hello, sizeof(hello));
  SendFrame(fd, DataFrame(1, 5000, 0, 16), std::string(16, '\x7f'));
  EXPECT_TRUE(ClosedByReceiver(fd));
  close(fd);
  // Something that is not a hello at all.
  const int junk = Dial();
  ASSERT_GE(junk, 0);
  Send(junk,
       "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
       "0123456789012345678901",
       48);
  EXPECT_TRUE(ClosedByReceiver(junk));
  close(junk);
  ExpectExactAverages(1);
}

TEST_F(TcpRingInputTest, AnAuthenticatedCallerThatLiesIsCutOffAndTheRingGoesOn) {
  ExpectExactAverages(0);
  const tcp::Ticket ticket = AskForTicket();
  uint8_t hello[tcp::kHelloBytes];
  tcp_ring::EncodeHello(ticket, 1, hello);
  const auto cut_off_after = [&](const std::string& what, const Frame& f,
                                 const std::string& payload) {
    const int fd = Dial();
    ASSERT_GE(fd, 0);
    Send(fd, hello, sizeof(hello));
    SendFrame(fd, f, payload);
    EXPECT_TRUE(ClosedByReceiver(fd)) << what;
    close(fd);
  };
  // The control: with the ticket, a well-formed frame is taken (the end of an operation that is
  // over here is acknowledged), so the cuts below are for what the frames say.
  {
    const int fd = Dial();
    ASSERT_GE(fd, 0);
    Send(fd, hello, sizeof(hello));
    Frame end;
    end.kind = FrameKind::kEnd;
    end.header.operation = 0;
    end.header.sender = 1;
    SendFrame(fd, end);
    uint8_t raw[kFrameHeaderBytes];
    ASSERT_TRUE(tcp::ReceiveExact(fd, raw, sizeof(raw)).ok());
    Frame ack;
    ASSERT_TRUE(tcp_ring::DecodeFrame(raw, &ack).ok());
    EXPECT_EQ(ack.kind, FrameKind::kAck);
    EXPECT_EQ(ack.header.operation, 0u);
    close(fd);
  }
  // A payload outside the buffer its header declares (checked before anything is allocated).
  cut_off_after("outside the buffer", DataFrame(1, 4, 0, 1 << 20), "");
  // A segment 1 GiB long.
  cut_off_after("over the bound", DataFrame(1, uint64_t{1} << 40, 0, tcp_ring::kMaxDataBytes + 4),
                "");
  // An operation far ahead of this rank's.
  cut_off_after("far ahead", DataFrame(1000, 4, 0, 16), std::string(16, '\0'));
  // An abort reason that is not UTF-8 (it would become the worker's status).
  Frame abort;
  abort.kind = FrameKind::kAbort;
  abort.header.operation = 1;
  abort.payload_bytes = 5;
  cut_off_after("not UTF-8", abort, "bad \xff");
  // An ack on the receiving side.
  Frame ack;
  ack.kind = FrameKind::kAck;
  cut_off_after("an ack", ack, "");
  ExpectExactAverages(1);
}

// Before: a frame's generation was taken at its word and its sender never checked, so one frame
// of a later generation, from any connection that had the ticket, made rank 0 drop every
// operation it was on and jump to that generation: against the old link the next all-reduce ran
// into its deadline. Now a connection speaks for the rank its hello named, only the previous
// rank's frames are taken, and a generation must have been announced by a re-formation.
TEST_F(TcpRingInputTest, FramesOfAnotherRankOrAnUnannouncedGenerationAreRefused) {
  ExpectExactAverages(0);
  const tcp::Ticket ticket = AskForTicket();
  const auto cut_off = [&](const std::string& what, uint32_t hello_sender, const Frame& f) {
    uint8_t hello[tcp::kHelloBytes];
    tcp_ring::EncodeHello(ticket, hello_sender, hello);
    const int fd = Dial();
    ASSERT_GE(fd, 0);
    Send(fd, hello, sizeof(hello));
    SendFrame(fd, f, std::string(f.payload_bytes, '\0'));
    EXPECT_TRUE(ClosedByReceiver(fd)) << what;
    close(fd);
  };
  // Rank 1 is rank 0's previous rank.
  cut_off("a later generation", 1, DataFrame((uint64_t{5} << kRingGenerationShift) + 1, 4, 0, 16));
  Frame other = DataFrame(1, 4, 0, 16);
  other.header.sender = 0;
  cut_off("a frame naming another rank than the hello", 1, other);
  cut_off("a hello naming a rank that does not send to rank 0", 0, other);
  ExpectExactAverages(1);
  ExpectExactAverages(2);
}

TEST(TcpRingLink, ANextRankThatIsNotOnTheTcpLinkIsNamed) {
  // Rank 0 on the TCP link, rank 1 on gRPC's: rank 1 does not hand out a data plane.
  TestRing ring = StartRing(2, "tcp");
  auto tcp = TcpRingLink::Create(TcpRingLinkOptions{});
  ASSERT_TRUE(tcp.ok()) << tcp.status();
  ring.ranks[0].server.reset();
  ring.ranks[0].ring = std::make_unique<RingAllReduce>(0, std::move(*tcp));
  int port = 0;
  ring.ranks[0].server = StartServer("127.0.0.1:0", {ring.ranks[0].ring->service()}, &port);
  ASSERT_NE(ring.ranks[0].server, nullptr);
  ring.ranks[0].address = "127.0.0.1:" + std::to_string(port);
  const std::vector<std::string> peers = ring_test::Peers(ring);
  for (auto& rank : ring.ranks) ASSERT_TRUE(rank.ring->Connect(peers).ok());
  std::vector<float> data(1000, 1.0f);
  AllReduceOptions options;
  options.deadline = std::chrono::seconds(5);
  absl::Status status = ring.ranks[0].ring->AllReduceAverage(data.data(), data.size(), options);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(ring.Name(1)));
  EXPECT_THAT(std::string(status.message()), HasSubstr("data plane"));
}

}  // namespace
}  // namespace strata
