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
. "$here/emulated_bench.sh"
bench=$(peer_benchmark "$build" strata-bench-allreduce-train)
emulated_bench_setup netddp
"$hosts_sh" up "$world" "$rate" "$cpu"
"$hosts_sh" check  # again, right before anything runs in the hosts

strata_cmd() {
  echo "$bench --rank $1 --world $world --dir $rendezvous --host $("$hosts_sh" addr "$1")" \
    "--arch $arch --steps $steps --transport plain-tcp --bucket-mb $bucket"
}
ddp_cmd() { echo "/usr/bin/python3 $here/ddp_rank.py $arch $1 $world $steps"; }

ours() {
  bucket=$1
  rendezvous=$(mktemp -d "$work/rendezvous-XXXXXX")
  STRATA_RUN_TOKEN=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n') run_ranks strata_cmd "strata-$bucket" samples_per_s
}
theirs() {
  MASTER_ADDR=$("$hosts_sh" addr 0) MASTER_PORT=$(free_port_on_h0) GLOO_SOCKET_IFNAME=eth0 \
    run_ranks ddp_cmd ddp samples_per_s
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
