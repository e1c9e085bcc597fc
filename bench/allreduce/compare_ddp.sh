#!/usr/bin/env bash
# Data-parallel training throughput: Strata's all-reduce synchroniser (strata-bench-allreduce-train)
# against PyTorch DDP with gloo (../shared/peers/ddp_train.py): ResNet-20, 28x28x1 random inputs,
# global batch 128, max(1, 2/N) threads per process, N processes on loopback. Runs alternate;
# prints every pair, then medians (samples/s) and the ratio strata / ddp per world size.
#   flock /tmp/strata-bench.lock bench/allreduce/compare_ddp.sh [BUILD_DIR] [RUNS] [STEPS] [WORLDS...]
set -euo pipefail
build=${1:-build}; runs=${2:-3}; steps=${3:-20}; shift 3 2>/dev/null || shift $#
worlds=("$@"); [ ${#worlds[@]} -gt 0 ] || worlds=(2 4)
here=$(cd "$(dirname "$0")/../.." && pwd)
peer="$here/../shared/peers/ddp_train.py"
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
table=()
for world in "${worlds[@]}"; do
  ours=(); theirs=()
  for i in $(seq "$runs"); do
    o=$("$build/bin/strata-bench-allreduce-train" --world "$world" --steps "$steps" | sed -n 's/.*samples_per_s=//p')
    t=$(/usr/bin/python3 "$peer" "$world" "$steps" 2>/dev/null | sed -n 's/.*samples_per_s=//p')
    echo "world=$world run $i: strata $o samples/s, ddp $t samples/s"
    ours+=("$o"); theirs+=("$t")
  done
  mo=$(median "${ours[@]}"); mt=$(median "${theirs[@]}")
  table+=("$(awk -v w="$world" -v a="$mo" -v b="$mt" 'BEGIN {printf "| %d | %.0f | %.0f | %.2f |", w, a, b, a / b}')")
done
echo
echo "| world | strata samples/s (median) | DDP samples/s (median) | ratio strata/ddp |"
echo "|---|---|---|---|"
printf '%s\n' "${table[@]}"
