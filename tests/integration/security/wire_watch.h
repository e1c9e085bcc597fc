// What crosses the sockets of a run, seen from outside the product: every TCP segment on the
// loopback interface (an AF_PACKET socket, so CAP_NET_RAW: root), folded into connections with
// the first payload bytes each side sent, and the listening TCP ports of given processes (their
// socket inodes under /proc/PID/fd matched with /proc/net/tcp{,6}). The tests of "with TLS on,
// nothing travels in plaintext" assert on these and on nothing the services say about themselves.
#pragma once

#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <absl/status/statusor.h>
#include <absl/strings/str_cat.h>

namespace strata::testing {

// One TCP connection as the capture saw it from its SYN on.
struct WatchedConnection {
  uint32_t client_ip = 0, server_ip = 0;  // host order
  uint16_t client_port = 0, server_port = 0;
  std::string client_first, server_first;  // the first bytes of each side's first segment
  uint64_t client_bytes = 0, server_bytes = 0;
  bool client_first_seen = false, server_first_seen = false;
  // A TLS record of type handshake (22) with a 3.x version: how every TLS connection starts.
  static bool StartsWithTlsHandshake(const std::string& first) {
    return first.size() >= 3 && static_cast<uint8_t>(first[0]) == 0x16 &&
           static_cast<uint8_t>(first[1]) == 0x03 && static_cast<uint8_t>(first[2]) <= 0x04;
  }
  std::string Describe() const {
    auto hex = [](const std::string& s) {
      std::string out;
      for (unsigned char c : s) absl::StrAppend(&out, absl::Hex(c, absl::kZeroPad2), " ");
      return out;
    };
    return absl::StrCat("127.0.0.1:", client_port, " -> :", server_port, " (", client_bytes,
                        " bytes out, first ", hex(client_first), "; ", server_bytes,
                        " bytes back, first ", hex(server_first), ")");
  }
};

class LoopbackCapture {
 public:
  // Starts capturing; an error when this process may not open a packet socket.
  static absl::StatusOr<std::unique_ptr<LoopbackCapture>> Start() {
    const int fd = ::socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    if (fd < 0) {
      return absl::PermissionDeniedError(absl::StrCat("cannot open a packet socket (",
                                                      std::strerror(errno),
                                                      "): the loopback capture needs "
                                                      "CAP_NET_RAW (run as root)"));
    }
    std::unique_ptr<LoopbackCapture> c(new LoopbackCapture(fd));
    // IPv4 TCP arriving on lo, and only the first 128 bytes of each frame: the headers and the
    // start of the payload are all this needs. Each loopback frame shows up twice, leaving and
    // arriving; the filter drops the copy leaving (pkttype OUTGOING), which halves the frames.
    static sock_filter code[] = {
        {0x30, 0, 0, static_cast<uint32_t>(SKF_AD_OFF + SKF_AD_PKTTYPE)},  // ldb pkttype
        {0x15, 5, 0, PACKET_OUTGOING},                                     // jeq OUTGOING: drop
        {0x28, 0, 0, 12},                                                  // ldh [12]: ethertype
        {0x15, 0, 3, 0x0800},                                              // jeq IPv4, else drop
        {0x30, 0, 0, 23},                                                  // ldb [23]: protocol
        {0x15, 0, 1, 6},                                                   // jeq TCP, else drop
        {0x06, 0, 0, kSnapBytes},                                          // ret 128
        {0x06, 0, 0, 0},                                                   // ret 0
    };
    sock_fprog program{static_cast<unsigned short>(sizeof(code) / sizeof(code[0])), code};
    if (::setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &program, sizeof(program)) != 0) {
      return absl::InternalError(absl::StrCat("SO_ATTACH_FILTER: ", std::strerror(errno)));
    }
    // A receive ring (TPACKET_V2) rather than recvfrom: the kernel copies the 128 bytes of each
    // frame into a slot of a 64 MiB ring this process maps, so 262,144 frames can wait while the
    // reader is starved on a loaded machine. (Through recvfrom each waiting frame is charged its
    // whole buffer, up to 64 KiB on loopback, against the socket's receive limit: with 256 MiB a
    // full suite once outran the reader by one frame.)
    int version = TPACKET_V2;
    if (::setsockopt(fd, SOL_PACKET, PACKET_VERSION, &version, sizeof(version)) != 0) {
      return absl::InternalError(absl::StrCat("PACKET_VERSION: ", std::strerror(errno)));
    }
    tpacket_req ring{};
    ring.tp_block_size = kBlockBytes;
    ring.tp_block_nr = kBlocks;
    ring.tp_frame_size = kFrameBytes;
    ring.tp_frame_nr = kBlocks * (kBlockBytes / kFrameBytes);
    if (::setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &ring, sizeof(ring)) != 0) {
      return absl::InternalError(absl::StrCat("PACKET_RX_RING: ", std::strerror(errno)));
    }
    c->frames_ = ring.tp_frame_nr;
    c->ring_bytes_ = size_t{kBlocks} * kBlockBytes;
    void* mapped = ::mmap(nullptr, c->ring_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mapped == MAP_FAILED) {
      return absl::InternalError(absl::StrCat("mmap of the ring: ", std::strerror(errno)));
    }
    c->ring_ = static_cast<unsigned char*>(mapped);
    c->thread_ = std::thread([raw = c.get()] { raw->Loop(); });
    return c;
  }

  ~LoopbackCapture() {
    Stop();
    if (ring_ != nullptr) ::munmap(ring_, ring_bytes_);
    ::close(fd_);
  }

  // Stops capturing (idempotent) and returns every connection whose SYN it saw.
  std::vector<WatchedConnection> Stop() {
    if (thread_.joinable()) {
      stop_ = true;
      thread_.join();
      tpacket_stats stats{};
      socklen_t len = sizeof(stats);
      if (::getsockopt(fd_, SOL_PACKET, PACKET_STATISTICS, &stats, &len) == 0) {
        drops_ += stats.tp_drops;
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<WatchedConnection> out;
    for (const auto& [key, c] : connections_) out.push_back(c.seen);
    return out;
  }
  // Frames the kernel dropped because this reader fell behind (then a first segment may be lost).
  uint64_t drops() const { return drops_; }

 private:
  explicit LoopbackCapture(int fd) : fd_(fd) {}

  struct Tracked {
    WatchedConnection seen;
    uint32_t client_isn = 0, server_isn = 0;
    bool server_isn_known = false;
  };
  using Key =
      std::tuple<uint32_t, uint16_t, uint32_t, uint16_t>;  // client ip, port; server ip, port

  static constexpr uint32_t kSnapBytes = 128;
  static constexpr uint32_t kFrameBytes = 256;  // the slot header, the address and 128 bytes
  static constexpr uint32_t kBlockBytes = 1 << 18;
  static constexpr uint32_t kBlocks = 256;

  // Walks the ring's slots in order: a slot the kernel filled has TP_STATUS_USER set, and is
  // handed back by writing TP_STATUS_KERNEL once read.
  void Loop() {
    size_t next = 0, read_after_stop = 0;
    while (true) {
      auto* slot = reinterpret_cast<tpacket2_hdr*>(ring_ + next * kFrameBytes);
      const bool filled =
          (__atomic_load_n(&slot->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER) != 0;
      // Once stopped it reads what is waiting (at most one ring's worth, since other tests may
      // keep loopback busy) and returns.
      if (stop_ && (!filled || ++read_after_stop > frames_)) return;
      if (!filled) {
        pollfd p{fd_, POLLIN, 0};
        ::poll(&p, 1, 50);
        continue;
      }
      Take(reinterpret_cast<const unsigned char*>(slot) + slot->tp_mac, slot->tp_snaplen);
      __atomic_store_n(&slot->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
      next = (next + 1) % frames_;
    }
  }

  static uint32_t Be32(const unsigned char* p) {
    return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
  }
  static uint16_t Be16(const unsigned char* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }

  void Take(const unsigned char* frame, size_t n) {
    if (n < 14 + 20) return;
    const unsigned char* ip = frame + 14;
    const size_t ihl = (ip[0] & 0x0f) * 4u;
    const size_t ip_total = Be16(ip + 2);
    if (n < 14 + ihl + 20) return;
    const unsigned char* tcp = ip + ihl;
    const uint32_t src = Be32(ip + 12), dst = Be32(ip + 16);
    const uint16_t sport = Be16(tcp), dport = Be16(tcp + 2);
    const uint32_t seq = Be32(tcp + 4);
    const size_t tcp_len = (tcp[12] >> 4) * 4u;
    const uint8_t flags = tcp[13];
    const bool syn = flags & 0x02, ack = flags & 0x10;
    const size_t payload_len = ip_total > ihl + tcp_len ? ip_total - ihl - tcp_len : 0;
    const unsigned char* payload = tcp + tcp_len;
    const size_t have = frame + n > payload ? static_cast<size_t>(frame + n - payload) : 0;
    std::lock_guard<std::mutex> lock(mu_);
    if (syn && !ack) {
      Tracked& t = connections_[Key{src, sport, dst, dport}];
      t = Tracked{};
      t.seen.client_ip = src, t.seen.client_port = sport;
      t.seen.server_ip = dst, t.seen.server_port = dport;
      t.client_isn = seq;
      return;
    }
    auto record = [&](Tracked& t, bool from_client) {
      if (syn) {  // SYN+ACK
        t.server_isn = seq;
        t.server_isn_known = true;
        return;
      }
      if (payload_len == 0) return;
      std::string& first = from_client ? t.seen.client_first : t.seen.server_first;
      bool& first_seen = from_client ? t.seen.client_first_seen : t.seen.server_first_seen;
      (from_client ? t.seen.client_bytes : t.seen.server_bytes) += payload_len;
      const bool is_first =
          from_client ? seq == t.client_isn + 1 : t.server_isn_known && seq == t.server_isn + 1;
      if (is_first && !first_seen) {
        first.assign(reinterpret_cast<const char*>(payload), std::min<size_t>(have, 8));
        first_seen = true;
      }
    };
    if (auto it = connections_.find(Key{src, sport, dst, dport}); it != connections_.end()) {
      record(it->second, true);
    } else if (auto back = connections_.find(Key{dst, dport, src, sport});
               back != connections_.end()) {
      record(back->second, false);
    }
  }

  const int fd_;
  unsigned char* ring_ = nullptr;
  size_t ring_bytes_ = 0;
  size_t frames_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::map<Key, Tracked> connections_;
  uint64_t drops_ = 0;
};

// The socket inodes a process holds (/proc/PID/fd/N -> socket:[inode]).
inline std::set<uint64_t> SocketInodesOf(int pid) {
  std::set<uint64_t> inodes;
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    const std::string target = std::filesystem::read_symlink(entry.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) {
      inodes.insert(std::stoull(target.substr(8, target.size() - 9)));
    }
  }
  return inodes;
}

// The local ports of the TCP sockets in LISTEN state among `inodes` (IPv4 and IPv6 tables).
inline std::set<uint16_t> ListeningTcpPorts(const std::set<uint64_t>& inodes) {
  std::set<uint16_t> ports;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      if (state != "0A" || inode.empty() || !inodes.count(std::stoull(inode))) continue;
      ports.insert(
          static_cast<uint16_t>(std::stoul(local.substr(local.find(':') + 1), nullptr, 16)));
    }
  }
  return ports;
}

}  // namespace strata::testing
