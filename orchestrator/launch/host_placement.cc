#include "orchestrator/launch/host_placement.h"

#include <arpa/inet.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>
#include <absl/strings/strip.h>

#include "services/common/base/files.h"

namespace strata {
namespace {

// The file system of namespace files (/proc/PID/ns/*, and the bind mounts under /run/netns).
constexpr long kNamespaceFsMagic = 0x6e736673;  // NSFS_MAGIC

// The identity of a namespace file: the same (device, inode) is the same namespace.
absl::StatusOr<std::pair<dev_t, ino_t>> NamespaceId(const std::string& path) {
  struct stat st {};
  struct statfs fs {};
  if (::stat(path.c_str(), &st) != 0 || ::statfs(path.c_str(), &fs) != 0) {
    return absl::NotFoundError(absl::StrCat("no network namespace at ", path));
  }
  if (static_cast<long>(fs.f_type) != kNamespaceFsMagic) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a namespace file"));
  }
  return std::make_pair(st.st_dev, st.st_ino);
}

}  // namespace

absl::StatusOr<HostPlacement> HostPlacement::Load(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) {
    return absl::NotFoundError(absl::StrCat("--hosts ", path, ": ", text.status().message()));
  }
  HostPlacement placement;
  std::vector<std::pair<dev_t, ino_t>> ids;  // per host so far
  int number = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    ++number;
    const size_t hash = line.find('#');
    if (hash != absl::string_view::npos) line = line.substr(0, hash);
    std::vector<std::string> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.empty()) continue;
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(
          absl::StrCat("--hosts ", path, " line ", number, ": ", why));
    };
    if (fields.size() != 4) {
      return bad(absl::StrCat("expected NAME NETNS ADDRESS CPU_GROUP, found ", fields.size(),
                              " field(s)"));
    }
    EmulatedHost host{fields[0], fields[1], fields[2], fields[3] == "-" ? "" : fields[3]};
    auto id = NamespaceId(host.network_namespace);
    if (!id.ok()) {
      return bad(
          id.status().code() == absl::StatusCode::kNotFound
              ? absl::StrCat("no network namespace at ", host.network_namespace,
                             " (are the hosts up? bench/network/emulated_hosts.sh up N RATE)")
              : std::string(id.status().message()));
    }
    for (size_t i = 0; i < placement.hosts_.size(); ++i) {
      if (ids[i] == *id) {
        return bad(absl::StrCat("host ", host.name, " has the network namespace of host ",
                                placement.hosts_[i].name, ": every host needs its own"));
      }
    }
    ids.push_back(*id);
    in_addr parsed{};
    if (::inet_pton(AF_INET, host.address.c_str(), &parsed) != 1) {
      return bad(absl::StrCat("'", host.address, "' is not an IPv4 address"));
    }
    if (!host.cpu_group.empty() &&
        ::access(absl::StrCat(host.cpu_group, "/cgroup.procs").c_str(), W_OK) != 0) {
      return bad(absl::StrCat("CPU group ", host.cpu_group, " has no writable cgroup.procs"));
    }
    for (const EmulatedHost& other : placement.hosts_) {
      if (other.name == host.name || other.address == host.address) {
        return bad(absl::StrCat("host ", host.name, " (", host.address, ") is listed twice"));
      }
    }
    placement.hosts_.push_back(std::move(host));
  }
  if (placement.hosts_.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("--hosts ", path, ": lists ", placement.hosts_.size(),
                     " host(s); the head and at least one host for the services are needed"));
  }
  auto mine = NamespaceId("/proc/self/ns/net");
  auto head = NamespaceId(placement.head().network_namespace);
  if (!mine.ok() || !head.ok() || *mine != *head) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--hosts ", path, ": strata run must run on the head host ", placement.head().name,
        " (network namespace ", placement.head().network_namespace,
        "), so that it reaches every host's address; start it there, e.g. "
        "bench/network/emulated_hosts.sh exec ",
        placement.head().name, " strata run ..."));
  }
  return placement;
}

std::string ListenHostOf(const EmulatedHost* host) {
  return host != nullptr ? host->address : "127.0.0.1";
}

std::string HeadListenHost(const std::optional<HostPlacement>& hosts) {
  return ListenHostOf(hosts ? &hosts->head() : nullptr);
}

const EmulatedHost& HostPlacement::ForService(int index) const {
  const size_t others = hosts_.size() - 1;
  return hosts_[1 + static_cast<size_t>(index) % others];
}

}  // namespace strata
