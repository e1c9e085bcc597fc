#!/usr/bin/env bash
# Ring all-reduce bandwidth on an emulated network: Strata's ring on its plain-TCP link
# (strata-bench-allreduce --transport plain-tcp, the path between machines) against PyTorch's gloo,
# world 4 (or WORLD), one rank per emulated host (emulated_hosts.sh: a namespace each, a bridge, a tbf limit of
# RATE each way), buffers of 1, 4 and 25 MiB. The two alternate RUNS times; prints every run, then
# the medians of busbw (MB/s, algbw * 2(n-1)/n), their ratio, and each one's share of the link's
# rate (busbw cannot exceed the rate of one host's link: every rank sends and receives
# 2(n-1)/n of the buffer per operation over it). Needs root; run it under the locks:
#   flock /tmp/strata-build.lock flock /tmp/strata-bench.lock \
#     bench/network/compare_gloo_emulated.sh RATE RUNS ITERS [BUILD_DIR]
set -euo pipefail
rate=${1:?usage: $0 RATE RUNS ITERS [BUILD_DIR]}
runs=${2:-3}
iters=${3:-20}
build=${4:-build}
world=${WORLD:-4}
here=$(cd "$(dirname "$0")" && pwd)
hosts_sh="$here/emulated_hosts.sh"
. "$here/emulated_bench.sh"
bench=$(peer_benchmark "$build" strata-bench-allreduce)
emulated_bench_setup netem
"$hosts_sh" up "$world" "$rate"
"$hosts_sh" check  # again, right before anything runs in the hosts
link_MBps=$(awk -v b="$rate" 'BEGIN {
  r = tolower(b); n = r + 0; u = substr(r, length(n "") + 1)
  m = (u == "bit") ? 1 : (u == "kbit") ? 1e3 : (u == "mbit") ? 1e6 : (u == "gbit") ? 1e9 : 0
  printf "%.0f\n", n * m / 8 / 1e6 }')

strata_cmd() {
  echo "$bench --rank $1 --world $world --dir $rendezvous --host $("$hosts_sh" addr "$1")" \
    "--floats $floats --iters $iters --transport plain-tcp"
}
gloo_cmd() { echo "/usr/bin/python3 $here/gloo_rank.py $1 $world $floats $iters"; }

ours() {
  rendezvous=$(mktemp -d "$work/rendezvous-XXXXXX")
  # The ranks are started one by one, so they share a run token through the environment.
  STRATA_RUN_TOKEN=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n') run_ranks strata_cmd strata busbw_MBps
}
theirs() {
  MASTER_ADDR=$("$hosts_sh" addr 0) MASTER_PORT=$(free_port_on_h0) GLOO_SOCKET_IFNAME=eth0 \
    run_ranks gloo_cmd gloo busbw_MBps
}

median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
table=()
echo "$(date -u '+%Y-%m-%d %H:%M UTC'): world $world, one rank per host, $rate each way per host (link ${link_MBps} MB/s), $runs runs of $iters operations"
for floats in 262144 1048576 6553600; do
  s=(); g=()
  for i in $(seq "$runs"); do
    a=$(ours)
    b=$(theirs)
    echo "floats=$floats run $i: strata tcp link $a MB/s, gloo $b MB/s"
    s+=("$a"); g+=("$b")
  done
  ms=$(median "${s[@]}"); mg=$(median "${g[@]}")
  table+=("$(awk -v f="$floats" -v s="$ms" -v g="$mg" -v l="$link_MBps" -v r="$rate" \
    'BEGIN {printf "| %s | %g MiB | %.0f | %.0f | %.2f | %.0f | %.2f | %.2f |", r, f * 4 / 1048576, s, g, s / g, l, s / l, g / l}')")
done
echo
echo "| link | buffer | strata tcp link busbw | gloo busbw | strata / gloo | link MB/s | strata / link | gloo / link |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${table[@]}"
