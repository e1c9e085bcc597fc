// Emulated hosts for `strata run --hosts FILE`: the run's processes are spread over network
// namespaces of this machine, one host each where there are enough, so that what they send each
// other crosses links with a rate of their own (bench/network/emulated_hosts.sh makes the hosts
// and writes the file). The first host of the file is the head: `strata run` must itself run in
// its namespace, and the evaluator, the sharder, the broker and the producer stay with it. The
// parameter servers, then the workers (stream replicas), take hosts 2, 3, ... in turn. Every
// service listens on its host's address, so peers and the orchestrator reach it across the
// links; the run directory stays one shared directory (namespaces split the network, not the
// files). docs/benchmarks.md, "On an emulated network", says what such hosts are and are not.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

namespace strata {

struct EmulatedHost {
  std::string name;               // "h1"
  std::string network_namespace;  // /run/netns/strata-h1
  std::string address;            // 10.231.0.2: the services of this host listen here
  std::string cpu_group;          // a cgroup-v1 cpu directory the host's processes join, or ""
};

class HostPlacement {
 public:
  // Reads FILE: one host a line, `NAME NETNS ADDRESS CPU_GROUP` (CPU_GROUP "-" for none), '#'
  // comments; at least two hosts (the head and one for the services). Fails, naming the line,
  // on a malformed line, a namespace that does not exist, an address that is not IPv4 or a
  // CPU group without cgroup.procs; and when this process does not run in the head's namespace.
  static absl::StatusOr<HostPlacement> Load(const std::string& path);

  const EmulatedHost& head() const { return hosts_.front(); }
  // The host of the `index`-th service placed (0-based): hosts after the head, in turn.
  const EmulatedHost& ForService(int index) const;
  const std::vector<EmulatedHost>& hosts() const { return hosts_; }

 private:
  std::vector<EmulatedHost> hosts_;
};

// Where a service listens: its emulated host's address, or loopback without emulated hosts.
std::string ListenHostOf(const EmulatedHost* host);
// The same for the head (the orchestrator's own endpoints) of `hosts`, if any.
std::string HeadListenHost(const std::optional<HostPlacement>& hosts);

}  // namespace strata
