#!/usr/bin/env bash
# Emulated hosts on one machine: every "host" is a network namespace with one interface (eth0, a
# veth) plugged into a bridge that lives in a namespace of its own, an address in a private /24,
# loopback up, and a token-bucket (tbf) limit of RATE on both directions of its link, as a NIC of
# that speed would have. Optionally every host also gets a CPU quota (a cgroup v1 cpu group), so a
# host has a speed. Nothing can leave the machine: the namespaces have no default route (only the
# /24 and lo are routable, IPv6 is off), and `up` and `check` verify that before anything runs.
# The kernel here has no netem: links have a rate but no added delay or loss.
#
# Usage (as root):
#   emulated_hosts.sh up N RATE [CPU_PERCENT]  make hosts h0..h(N-1); RATE as tc takes it (100mbit,
#                                              1gbit, 10gbit); CPU_PERCENT: share of one core each,
#                                              at least 10 (a quota per 10 ms period)
#   emulated_hosts.sh check                    verify that only the /24 and lo are routable
#   emulated_hosts.sh exec HOST CMD [ARGS...]  run CMD inside HOST (h0 or 0), in its CPU group
#   emulated_hosts.sh addr HOST                print HOST's address
#   emulated_hosts.sh hosts                    print the hosts that exist, one a line
#   emulated_hosts.sh hosts-file               print them as `strata run --hosts FILE` reads them
#   emulated_hosts.sh rate HOST RATE           give HOST's link another rate (both directions)
#   emulated_hosts.sh down                     remove every namespace and CPU group made by `up`
# `up` removes what it made if it fails or is interrupted. Environment: STRATA_NET_PREFIX (default
# "strata": namespaces PREFIX-br, PREFIX-h0, ...; give each concurrent user its own) and
# STRATA_NET_SUBNET (first three octets, default 10.231.0; host i is SUBNET.(i+1)).
set -euo pipefail

prefix=${STRATA_NET_PREFIX:-strata}
subnet=${STRATA_NET_SUBNET:-10.231.0}
bridge_ns="$prefix-br"
cgroup_root=/sys/fs/cgroup/cpu

die() {
  echo "emulated_hosts: $*" >&2
  exit 1
}

host_ns() { echo "$prefix-h${1#h}"; }
host_addr() { echo "$subnet.$((${1#h} + 1))"; }
cgroup_dir() { echo "$cgroup_root/$prefix-h${1#h}"; }

# The namespaces of this prefix, hosts in order.
hosts() {
  ip netns list | awk '{print $1}' | { grep -E "^$prefix-h[0-9]+$" || true; } |
    sed "s/^$prefix-h//" | sort -n | sed 's/^/h/'
}

down() {
  local ns
  for ns in $(ip netns list | awk '{print $1}' | { grep -E "^$prefix-(br|h[0-9]+)$" || true; }); do
    ip netns delete "$ns"  # its veth end goes with it, and with that the peer end
  done
  local dir
  for dir in "$cgroup_root/$prefix"-h*; do
    [[ -d $dir ]] || continue
    # Processes still in the group or in a service's quota nested in it (a run that was killed)
    # would keep it busy.
    local group
    for group in "$dir"/*/ "$dir"; do
      [[ -f $group/cgroup.procs ]] || continue
      while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done <"$group/cgroup.procs"
      rmdir "$group" 2>/dev/null || { sleep 0.2; rmdir "$group"; }
    done
  done
}

# Bytes per second of a tc rate ("100mbit", "1gbit", "10gbit", "800kbit", "500000bit").
rate_bytes() {
  local rate=${1,,}
  awk -v r="$rate" 'BEGIN {
    n = r + 0; u = substr(r, length(n "") + 1)
    m = (u == "bit") ? 1 : (u == "kbit") ? 1e3 : (u == "mbit") ? 1e6 : (u == "gbit") ? 1e9 : -1
    if (n <= 0 || m < 0) exit 1
    printf "%.0f\n", n * m / 8 }' || return 1
}

# Refuses a subnet that this machine uses: the root namespace must reach it only through its
# default route (the processes of the emulated hosts never run in the root namespace, so nothing
# is ever sent there; this only keeps the emulated addresses from shadowing a real network).
check_root() {
  local route
  route=$(ip -4 route get "$subnet.1" 2>&1 || true)
  if ! grep -q " via " <<<"$route" || grep -qE "^(local|broadcast) " <<<"$route"; then
    die "the root namespace has a route of its own to $subnet.0/24 ($route); choose another STRATA_NET_SUBNET"
  fi
}

# From inside every namespace only the /24 and loopback are routable, and there is no IPv6.
check() {
  local ns all=("$bridge_ns") h line bad=0
  for h in $(hosts); do all+=("$(host_ns "$h")"); done
  [[ ${#all[@]} -gt 1 ]] || die "no hosts with prefix $prefix (run: $0 up N RATE)"
  for ns in "${all[@]}"; do
    [[ -e /run/netns/$ns ]] || die "namespace $ns is missing"
    while read -r line; do
      [[ -z $line ]] && continue
      # Allowed: routes of lo (127/8) and of the /24 (kernel routes, local and broadcast entries).
      if ! grep -qE "^((local|broadcast) )?(127\.|$subnet\.)" <<<"$line"; then
        echo "emulated_hosts: namespace $ns has a route outside $subnet.0/24 and lo: $line" >&2
        bad=1
      fi
    done < <(ip -n "$ns" -4 route show table all)
    if [[ -n $(ip -n "$ns" -6 route show table all) ]]; then
      echo "emulated_hosts: namespace $ns has IPv6 routes" >&2
      bad=1
    fi
    # An address outside the /24 (TEST-NET-2) must be unreachable.
    if ip -n "$ns" -4 route get 198.51.100.1 >/dev/null 2>&1; then
      echo "emulated_hosts: namespace $ns can route to 198.51.100.1" >&2
      bad=1
    fi
  done
  [[ $bad -eq 0 ]] || die "routing check failed; nothing was started"
}

# Before any interface of namespace $1 comes up: no link-local IPv6 addresses, no IPv6 routes.
no_ipv6() {
  nsenter --net="/run/netns/$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
    net.ipv6.conf.default.disable_ipv6=1 net.ipv6.conf.lo.disable_ipv6=1 >/dev/null
}

# The tbf arguments for RATE (BYTES per second). The bucket holds 1 ms of traffic (at least
# 64 KiB, so that one TSO segment of a veth fits): a deeper bucket lets a short burst run faster
# than the rate.
tbf_shape() {
  local rate=$1 bytes=$2
  echo "tbf rate $rate burst $((bytes / 1000 > 65536 ? bytes / 1000 : 65536)) latency 50ms"
}

# A slower (or faster) link for one host, both directions, while the hosts are up.
set_rate() {
  local host=$1 rate=$2 bytes shape
  [[ $host =~ ^h?[0-9]+$ ]] || die "HOST must be h<i> or <i>, not '$host'"
  [[ -e /run/netns/$(host_ns "$host") ]] || die "no host $host (namespace $(host_ns "$host"))"
  bytes=$(rate_bytes "$rate") || die "RATE must look like 100mbit, 1gbit or 10gbit, not '$rate'"
  read -ra shape <<<"$(tbf_shape "$rate" "$bytes")"
  tc -n "$(host_ns "$host")" qdisc replace dev eth0 root "${shape[@]}"
  tc -n "$bridge_ns" qdisc replace dev "h${host#h}" root "${shape[@]}"
  echo "emulated_hosts: $host's link is now $rate each way"
}

up() {
  local n=$1 rate=$2 cpu=${3:-}
  [[ $n =~ ^[0-9]+$ && $n -ge 1 && $n -le 250 ]] || die "N must be 1..250, not '$n'"
  local bytes
  bytes=$(rate_bytes "$rate") || die "RATE must look like 100mbit, 1gbit or 10gbit, not '$rate'"
  if [[ -n $cpu ]]; then
    [[ $cpu =~ ^[0-9]+$ && $cpu -ge 10 ]] || die "CPU_PERCENT must be an integer of at least 10, not '$cpu'"
    [[ -w $cgroup_root ]] || die "no writable cgroup v1 cpu controller at $cgroup_root"
  fi
  [[ $EUID -eq 0 ]] || die "needs root (network namespaces)"
  [[ -z $(ip netns list | awk '{print $1}' | grep -E "^$prefix-(br|h[0-9]+)$" || true) ]] ||
    die "namespaces with prefix $prefix exist already (another run, or run: $0 down)"
  check_root
  # From here on, a failure or an interrupt removes what was made.
  trap 'down' EXIT
  trap 'exit 130' INT TERM
  local shape
  read -ra shape <<<"$(tbf_shape "$rate" "$bytes")"
  ip netns add "$bridge_ns"
  no_ipv6 "$bridge_ns"
  ip -n "$bridge_ns" link add br0 type bridge
  ip -n "$bridge_ns" link set br0 up
  local i ns
  for ((i = 0; i < n; i++)); do
    ns=$(host_ns "$i")
    ip netns add "$ns"
    no_ipv6 "$ns"
    # Made in the bridge's namespace with the other end straight into the host's: no interface
    # ever appears in the root namespace.
    ip -n "$bridge_ns" link add "h$i" type veth peer name eth0 netns "$ns"
    ip -n "$bridge_ns" link set "h$i" master br0
    ip -n "$ns" addr add "$(host_addr "$i")/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip -n "$bridge_ns" link set "h$i" up
    tc -n "$ns" qdisc add dev eth0 root "${shape[@]}"         # the host's sending side
    tc -n "$bridge_ns" qdisc add dev "h$i" root "${shape[@]}"  # its receiving side
    if [[ -n $cpu ]]; then
      mkdir "$(cgroup_dir "$i")"
      # A 10 ms period: a host that used its share waits at most the rest of 10 ms, not of the
      # default 100 ms, which would add tens of milliseconds to every request and reply that
      # arrives while it is throttled (the kernel's smallest quota, 1 ms, is 10% of a core).
      echo 10000 >"$(cgroup_dir "$i")/cpu.cfs_period_us"
      echo $((cpu * 100)) >"$(cgroup_dir "$i")/cpu.cfs_quota_us"
    fi
  done
  check
  trap - EXIT INT TERM
  echo "emulated_hosts: $n hosts up (prefix $prefix, $subnet.1-$subnet.$n/24, $rate each way${cpu:+, $cpu% of a core each}); only the /24 and lo are routable"
}

# One line a host, NAME NETNS ADDRESS CPU_GROUP ("-" without one); h0 first: the head, where
# `strata run --hosts` itself runs.
hosts_file() {
  local h
  [[ -n $(hosts) ]] || die "no hosts with prefix $prefix (run: $0 up N RATE)"
  echo "# emulated hosts $prefix ($subnet.0/24): NAME NETNS ADDRESS CPU_GROUP; the first is the head"
  for h in $(hosts); do
    local group=-
    [[ -d $(cgroup_dir "$h") ]] && group=$(cgroup_dir "$h")
    echo "$h /run/netns/$(host_ns "$h") $(host_addr "$h") $group"
  done
}

exec_in() {
  local host=$1
  shift
  [[ $host =~ ^h?[0-9]+$ ]] || die "HOST must be h<i> or <i>, not '$host'"
  local ns
  ns=$(host_ns "$host")
  [[ -e /run/netns/$ns ]] || die "no host $host (namespace $ns)"
  # The CPU group first, then the namespace (nsenter, unlike `ip netns exec`, leaves /sys alone).
  if [[ -d $(cgroup_dir "$host") ]]; then echo "$BASHPID" >"$(cgroup_dir "$host")/cgroup.procs"; fi
  exec nsenter --net="/run/netns/$ns" -- "$@"
}

cmd=${1:-}
shift || true
case $cmd in
  up) [[ $# -ge 2 ]] || die "usage: $0 up N RATE [CPU_PERCENT]"; up "$@" ;;
  down) down ;;
  check) check ;;
  hosts) hosts ;;
  hosts-file) hosts_file ;;
  rate) [[ $# -eq 2 ]] || die "usage: $0 rate HOST RATE"; set_rate "$@" ;;
  addr) [[ $# -eq 1 ]] || die "usage: $0 addr HOST"; host_addr "$1" ;;
  exec) [[ $# -ge 2 ]] || die "usage: $0 exec HOST CMD [ARGS...]"; exec_in "$@" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
