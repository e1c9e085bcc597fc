#include "services/common/wire/shared_region.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>

#include <absl/strings/str_cat.h>

#include "services/common/wire/tcp_socket.h"

namespace strata {
namespace {

// A hand-over connection that does not present the offer's bytes within this long is closed.
constexpr std::chrono::milliseconds kPresentTimeout{1000};
// The worker's wait for its descriptor.
constexpr std::chrono::milliseconds kAttachTimeout{10000};

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::StatusOr<uint8_t*> Map(int fd, size_t bytes) {
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return Errno("mmap of the shared region");
  return static_cast<uint8_t*>(base);
}

// The abstract socket of `socket_id`, and its address length.
socklen_t SocketAddress(uint64_t socket_id, sockaddr_un* address) {
  std::memset(address, 0, sizeof(*address));
  address->sun_family = AF_UNIX;
  const std::string name = absl::StrCat("strata-region-", absl::Hex(socket_id, absl::kZeroPad16));
  std::memcpy(address->sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: abstract
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

void SetTimeouts(int fd, std::chrono::milliseconds timeout) {
  tcp::SetReceiveTimeout(fd, timeout);
  tcp::SetSendTimeout(fd, timeout);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Create(size_t area_bytes) {
  if (area_bytes == 0 || area_bytes > kMaxAreaBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a shared region of ", area_bytes,
                                                   " bytes per area (1 to ", kMaxAreaBytes, ")"));
  }
  const size_t bytes = RegionBytes(area_bytes);
  const int fd = memfd_create("strata-push-pull", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Errno("memfd_create");
  // Sealed at its size: the other side can neither shrink it under this one's accesses (which
  // would fault) nor grow it.
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    absl::Status error = Errno("sizing and sealing the shared region");
    close(fd);
    return error;
  }
  absl::StatusOr<uint8_t*> base = Map(fd, bytes);
  if (!base.ok()) {
    close(fd);
    return base.status();
  }
  std::unique_ptr<SharedRegion> region(new SharedRegion(fd, *base, area_bytes));
  absl::StatusOr<tcp::Ticket> nonce = tcp::RandomTicket();
  if (!nonce.ok()) return nonce.status();
  static_assert(sizeof(tcp::Ticket) == sizeof(SharedRegionOffer::nonce));
  std::memcpy(region->offer_.nonce.data(), nonce->data(), nonce->size());
  std::memcpy(*base, nonce->data(), nonce->size());
  region->offer_.region_bytes = bytes;
  // The hand-over socket, under a random name: bound before the offer names it, so nobody can
  // have taken the name first.
  absl::StatusOr<tcp::Ticket> id = tcp::RandomTicket();
  if (!id.ok()) return id.status();
  std::memcpy(&region->offer_.socket_id, id->data(), sizeof(region->offer_.socket_id));
  region->listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (region->listen_fd_ < 0) return Errno("socket for the shared region's hand-over");
  sockaddr_un address;
  const socklen_t length = SocketAddress(region->offer_.socket_id, &address);
  if (bind(region->listen_fd_, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      listen(region->listen_fd_, 4) != 0) {
    return Errno("listening for the shared region's hand-over");
  }
  return region;
}

bool SharedRegion::HandOver(int abandon_fd, std::chrono::milliseconds timeout) {
  if (listen_fd_ < 0 || fd_ < 0) return false;
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  bool handed = false;
  while (!handed) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        give_up - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {abandon_fd, POLLIN, 0}};
    const int ready = poll(fds, 2, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0 || fds[1].revents != 0) break;  // timed out, or the worker went on
    const int connection = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) continue;
    SetTimeouts(connection, kPresentTimeout);
    std::array<uint8_t, 32> presented{};
    if (tcp::ReceiveExact(connection, presented.data(), presented.size()).ok() &&
        tcp::SameTicket(presented, offer_.nonce)) {
      char byte = 'R';
      iovec part{&byte, 1};
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
      msghdr message{};
      message.msg_iov = &part;
      message.msg_iovlen = 1;
      message.msg_control = control;
      message.msg_controllen = sizeof(control);
      cmsghdr* c = CMSG_FIRSTHDR(&message);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd_, sizeof(int));
      handed = sendmsg(connection, &message, MSG_NOSIGNAL) == 1;
    }
    close(connection);
  }
  close(listen_fd_);
  listen_fd_ = -1;
  if (handed) {
    // The mapping stays; no descriptor of this process names the region any more.
    close(fd_);
    fd_ = -1;
  }
  return handed;
}

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Attach(const SharedRegionOffer& offer,
                                                                   size_t area_bytes) {
  if (area_bytes == 0 || area_bytes > kMaxAreaBytes ||
      offer.region_bytes != RegionBytes(area_bytes)) {
    return absl::FailedPreconditionError(absl::StrCat("the offered region has ", offer.region_bytes,
                                                      " bytes, ", RegionBytes(area_bytes),
                                                      " expected"));
  }
  sockaddr_un address;
  const socklen_t length = SocketAddress(offer.socket_id, &address);
  const std::string name(address.sun_path + 1, length - offsetof(sockaddr_un, sun_path) - 1);
  const int connection = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (connection < 0) return Errno("socket");
  // Another host, container or network namespace: the name is not there.
  if (connect(connection, reinterpret_cast<sockaddr*>(&address), length) != 0) {
    absl::Status error = absl::FailedPreconditionError(
        absl::StrCat("the region's socket @", name, " is not reachable: ", std::strerror(errno)));
    close(connection);
    return error;
  }
  SetTimeouts(connection, kAttachTimeout);
  int fd = -1;
  absl::Status status =
      tcp::SendAll(connection, offer.nonce.data(), offer.nonce.size(), nullptr, 0);
  if (status.ok()) {
    char byte = 0;
    iovec part{&byte, 1};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr message{};
    message.msg_iov = &part;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(connection, &message, MSG_CMSG_CLOEXEC);
    const cmsghdr* c = n == 1 ? CMSG_FIRSTHDR(&message) : nullptr;
    if (c != nullptr && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(sizeof(int))) {
      std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
    } else {
      status = absl::FailedPreconditionError(absl::StrCat("@", name, " handed over no descriptor"));
    }
  }
  close(connection);
  if (!status.ok()) return status;
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) != offer.region_bytes) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("@", name, " handed over a file that is not the offered region"));
  }
  // Only a sealed size keeps the mapping from faulting if the file were shrunk.
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("@", name, " handed over a file that is not sealed against shrinking"));
  }
  absl::StatusOr<uint8_t*> base = Map(fd, offer.region_bytes);
  close(fd);  // the mapping is all this process keeps: no descriptor names the region
  if (!base.ok()) return base.status();
  std::unique_ptr<SharedRegion> region(new SharedRegion(-1, *base, area_bytes));
  if (std::memcmp(*base, offer.nonce.data(), offer.nonce.size()) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("@", name, " handed over another region (other first bytes)"));
  }
  region->offer_ = offer;
  return region;
}

SharedRegion::~SharedRegion() {
  munmap(base_, RegionBytes(area_bytes_));
  if (fd_ >= 0) close(fd_);
  if (listen_fd_ >= 0) close(listen_fd_);
}

}  // namespace strata
