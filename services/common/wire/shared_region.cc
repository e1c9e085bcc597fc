#include "services/common/wire/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <absl/strings/str_cat.h>

#include "services/common/wire/tcp_socket.h"

namespace strata {
namespace {

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::StatusOr<uint8_t*> Map(int fd, size_t bytes) {
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return Errno("mmap of the shared region");
  return static_cast<uint8_t*>(base);
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
  // Sealed at its size: an attached process can neither shrink it under the server's accesses
  // (which would fault) nor grow it.
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
  region->offer_.pid = static_cast<uint32_t>(getpid());
  region->offer_.fd = static_cast<uint32_t>(fd);
  region->offer_.region_bytes = bytes;
  return region;
}

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Attach(const SharedRegionOffer& offer,
                                                                   size_t area_bytes) {
  if (area_bytes == 0 || area_bytes > kMaxAreaBytes ||
      offer.region_bytes != RegionBytes(area_bytes)) {
    return absl::FailedPreconditionError(absl::StrCat("the offered region has ", offer.region_bytes,
                                                      " bytes, ", RegionBytes(area_bytes),
                                                      " expected"));
  }
  const std::string path = absl::StrCat("/proc/", offer.pid, "/fd/", offer.fd);
  // Non-blocking and without a controlling terminal: in another pid namespace the path may name
  // any file of another process (a FIFO would block, a terminal would attach).
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return Errno(absl::StrCat("opening ", path));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) != offer.region_bytes) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not the offered region (not a regular file of its size)"));
  }
  // Only a sealed size keeps the mapping from faulting if the file were shrunk.
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, " is not sealed against shrinking"));
  }
  absl::StatusOr<uint8_t*> base = Map(fd, offer.region_bytes);
  if (!base.ok()) {
    close(fd);
    return base.status();
  }
  std::unique_ptr<SharedRegion> region(new SharedRegion(fd, *base, area_bytes));
  if (std::memcmp(*base, offer.nonce.data(), offer.nonce.size()) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " does not start with the offered bytes: another process's file"));
  }
  region->offer_ = offer;
  return region;
}

SharedRegion::~SharedRegion() {
  munmap(base_, RegionBytes(area_bytes_));
  close(fd_);
}

}  // namespace strata
