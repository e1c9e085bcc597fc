#!/usr/bin/env bash
# Data-parallel training on an emulated network: Strata's all-reduce synchroniser
# (strata-bench-allreduce-train, the ring on its plain-TCP link, the path between machines)
# against PyTorch DDP with gloo (bench/network/ddp_rank.py), world 4, one rank per emulated host
# (emulated_hosts.sh: a namespace each, a bridge, a tbf limit of RATE each way, CPU_PERCENT of a
# core each). The training is the loopback comparison's (bench/allreduce/compare_ddp.sh): ARCH
# resnet20 or mlp_wide on random 28x28x1 inputs, global batch 128, one thread per rank. Strata runs
# once per bucket size in BUCKETS (strategy.bucket_mb: 0 reduces after backward, larger values
# reduce buckets while backward runs; DDP always does, in 25 MB buckets). All alternate RUNS
# times; prints every run, then medians (samples/s) and the ratios to DDP. Needs root:
#   flock /tmp/strata-build.lock flock /tmp/strata-bench.lock \
#     bench/network/compare_ddp_emulated.sh RATE ARCH RUNS STEPS [CPU_PERCENT] [BUILD_DIR]
# Environment: BUCKETS (default "0 4").
set -euo pipefail
rate=${1:?usage: $0 RATE ARCH RUNS STEPS [CPU_PERCENT] [BUILD_DIR]}
arch=${2:?ARCH: resnet20 or mlp_wide}
runs=${3:-3}
steps=${4:-20}
cpu=${5:-50}
build=${6:-build}
buckets=(${BUCKETS:-0 4})
world=4
here=$(cd "$(dirname "$0")" && pwd)
hosts_sh="$here/emulated_hosts.sh"
bench="$(cd "$build" && pwd)/bin/strata-bench-allreduce-train"
[[ -x $bench ]] || { echo "no $bench (build the target strata-bench-allreduce-train)" >&2; exit 1; }
/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null ||
  { echo "PyTorch is missing (apt-get install python3-torch)" >&2; exit 1; }
export STRATA_NET_PREFIX=strata-ddp$$

work=$(mktemp -d /tmp/strata-netddp-XXXXXX)
cleanup() {
  # The ranks run under timeout(1), each in a process group of its own: their pids reach them.
  if [[ -f $work/pids ]]; then xargs -r kill <"$work/pids" 2>/dev/null || true; fi
  "$hosts_sh" down
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$hosts_sh" up "$world" "$rate" "$cpu"
"$hosts_sh" check  # again, right before anything runs in the hosts

# One process per host (its command line from $1, a function of the rank); prints rank 0's
# samples/s, or every rank's output and fails.
run_ranks() {
  local make_cmd=$1 tag=$2 r pids=() rc=0
  for ((r = 0; r < world; r++)); do
    # shellcheck disable=SC2046
    timeout 900 "$hosts_sh" exec "$r" $($make_cmd "$r") >"$work/$tag.$r.out" 2>&1 &
    pids+=($!)
    echo $! >>"$work/pids"
  done
  for r in "${!pids[@]}"; do wait "${pids[$r]}" || rc=1; done
  : >"$work/pids"
  if [[ $rc -ne 0 ]] || ! grep -q 'samples_per_s=' "$work/$tag.0.out"; then
    for ((r = 0; r < world; r++)); do echo "--- $tag rank $r" >&2; cat "$work/$tag.$r.out" >&2; done
    return 1
  fi
  sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p' "$work/$tag.0.out" | tail -1
}

strata_cmd() {
  echo "$bench --rank $1 --world $world --dir $rendezvous --host $("$hosts_sh" addr "$1")" \
    "--arch $arch --steps $steps --transport plain-tcp --bucket-mb $bucket"
}
ddp_cmd() { echo "/usr/bin/python3 $here/ddp_rank.py $arch $1 $world $steps"; }

ours() {
  bucket=$1
  rendezvous=$(mktemp -d "$work/rendezvous-XXXXXX")
  STRATA_RUN_TOKEN=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n') run_ranks strata_cmd "strata-$bucket"
}
theirs() {
  local port
  port=$("$hosts_sh" exec 0 /usr/bin/python3 -c \
    'import socket,sys; s=socket.socket(); s.bind((sys.argv[1],0)); print(s.getsockname()[1])' \
    "$("$hosts_sh" addr 0)")
  MASTER_ADDR=$("$hosts_sh" addr 0) MASTER_PORT=$port GLOO_SOCKET_IFNAME=eth0 run_ranks ddp_cmd ddp
}

median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "$(date -u '+%Y-%m-%d %H:%M UTC'): $arch, world $world, one rank per host, $rate each way and $cpu% of a core per host, $runs runs of $steps steps"
declare -A ours_runs
ddp_runs=()
for i in $(seq "$runs"); do
  line="run $i:"
  for b in "${buckets[@]}"; do
    v=$(ours "$b")
    ours_runs[$b]+="$v "
    line+=" strata bucket_mb=$b $v,"
  done
  d=$(theirs)
  ddp_runs+=("$d")
  echo "$line ddp $d samples/s"
done
md=$(median "${ddp_runs[@]}")
echo
echo "| link | arch | strata, bucket_mb | samples/s | DDP samples/s | strata / DDP |"
echo "|---|---|---|---|---|---|"
for b in "${buckets[@]}"; do
  # shellcheck disable=SC2086
  m=$(median ${ours_runs[$b]})
  awk -v r="$rate" -v a="$arch" -v b="$b" -v m="$m" -v d="$md" \
    'BEGIN {printf "| %s | %s | %s | %.0f | %.0f | %.2f |\n", r, a, b, m, d, m / d}'
done
