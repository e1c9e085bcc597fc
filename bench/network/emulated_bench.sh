# Sourced by the benchmarks of bench/network/ (not run): what each of them needs around the
# emulated hosts of emulated_hosts.sh. The sourcing script sets `world` (ranks, one per host)
# before calling run_ranks.
#   emulated_bench_setup TAG   a prefix of its own (STRATA_NET_PREFIX), a work directory ($work),
#                              and a trap that kills leftover ranks, takes the hosts down and
#                              removes $work on any exit
#   run_ranks MAKE_CMD TAG FIGURE   one process per host, its command line from MAKE_CMD RANK;
#                              prints rank 0's FIGURE (the number after "FIGURE=" in its output),
#                              or every rank's output and fails
#   free_port_on_h0            a port free on host 0's address (for env:// rendezvous)
#   peer_benchmark BUILD NAME  prints the path of BUILD/bin/NAME, and fails unless it is built and
#                              PyTorch (the peer these benchmarks run against) is installed
emulated_hosts_sh="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/emulated_hosts.sh"

emulated_bench_setup() {
  export STRATA_NET_PREFIX="strata-$1$$"
  work=$(mktemp -d "/tmp/strata-$1-XXXXXX")
  trap emulated_bench_cleanup EXIT
  trap 'exit 130' INT TERM
}

emulated_bench_cleanup() {
  # Ranks run under timeout(1), each in a process group of its own, and inside command
  # substitutions: neither this shell's jobs nor its process group reach them, their pids do.
  if [[ -f $work/pids ]]; then xargs -r kill <"$work/pids" 2>/dev/null || true; fi
  "$emulated_hosts_sh" down
  rm -rf "$work"
}

run_ranks() {
  local make_cmd=$1 tag=$2 figure=$3 r pids=() rc=0
  for ((r = 0; r < world; r++)); do
    # shellcheck disable=SC2046
    timeout 900 "$emulated_hosts_sh" exec "$r" $($make_cmd "$r") >"$work/$tag.$r.out" 2>&1 &
    pids+=($!)
    echo $! >>"$work/pids"
  done
  for r in "${!pids[@]}"; do wait "${pids[$r]}" || rc=1; done
  : >"$work/pids"  # all reaped: these pids may be reused from now on
  if [[ $rc -ne 0 ]] || ! grep -q "$figure=" "$work/$tag.0.out"; then
    for ((r = 0; r < world; r++)); do echo "--- $tag rank $r" >&2; cat "$work/$tag.$r.out" >&2; done
    return 1
  fi
  sed -n "s/.*$figure=\([0-9.]*\).*/\1/p" "$work/$tag.0.out" | tail -1
}

free_port_on_h0() {
  # Any port is free in a namespace of our own; ask the kernel for one all the same.
  "$emulated_hosts_sh" exec 0 /usr/bin/python3 -c \
    'import socket,sys; s=socket.socket(); s.bind((sys.argv[1],0)); print(s.getsockname()[1])' \
    "$("$emulated_hosts_sh" addr 0)"
}

peer_benchmark() {
  local binary
  binary="$(cd "$1" && pwd)/bin/$2"
  [[ -x $binary ]] || { echo "no $binary (build the target $2)" >&2; return 1; }
  /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null ||
    { echo "PyTorch is missing (apt-get install python3-torch)" >&2; return 1; }
  echo "$binary"
}
