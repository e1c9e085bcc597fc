#!/usr/bin/env bash
# Data-parallel training throughput: Strata's all-reduce synchroniser (strata-bench-allreduce-train)
# against PyTorch DDP with gloo (../shared/peers/ddp_train.py): ResNet-20, 28x28x1 random inputs,
# global batch 128, max(1, 2/N) threads per process, N processes on one machine. Strata's ring runs
# over loopback TCP (as between machines) and over Unix sockets (the local launcher's default);
# the three alternate. Prints every triple, then medians (samples/s) and the ratios to DDP.
# ARCH=mlp_wide runs the communication-heavy model (23 MB of gradients) against
# bench/allreduce/ddp_mlp_wide.py instead, the same set-up otherwise.
#   flock /tmp/strata-bench.lock [ARCH=mlp_wide] bench/allreduce/compare_ddp.sh [BUILD_DIR] [RUNS] [STEPS] [WORLDS...]
set -euo pipefail
build=${1:-build}; runs=${2:-3}; steps=${3:-20}; shift 3 2>/dev/null || shift $#
worlds=("$@"); [ ${#worlds[@]} -gt 0 ] || worlds=(2 4)
here=$(cd "$(dirname "$0")/../.." && pwd)
arch=${ARCH:-resnet20}
case "$arch" in
  resnet20) peer="$here/../shared/peers/ddp_train.py" ;;
  mlp_wide) peer="$here/bench/allreduce/ddp_mlp_wide.py" ;;
  *) echo "ARCH must be resnet20 or mlp_wide, not $arch" >&2; exit 2 ;;
esac
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ours() { "$build/bin/strata-bench-allreduce-train" --arch "$arch" --world "$1" --steps "$steps" --transport "$2" | sed -n 's/.*samples_per_s=//p'; }
table=()
for world in "${worlds[@]}"; do
  tcp=(); unix=(); theirs=()
  for i in $(seq "$runs"); do
    a=$(ours "$world" tcp)
    b=$(ours "$world" unix)
    t=$(/usr/bin/python3 "$peer" "$world" "$steps" 2>/dev/null | sed -n 's/.*samples_per_s=//p')
    echo "world=$world run $i: strata tcp $a samples/s, strata unix $b samples/s, ddp $t samples/s"
    tcp+=("$a"); unix+=("$b"); theirs+=("$t")
  done
  ma=$(median "${tcp[@]}"); mb=$(median "${unix[@]}"); mt=$(median "${theirs[@]}")
  table+=("$(awk -v w="$world" -v a="$ma" -v b="$mb" -v t="$mt" \
    'BEGIN {printf "| %d | %.0f | %.0f | %.0f | %.2f | %.2f |", w, a, b, t, a / t, b / t}')")
done
echo
echo "arch $arch"
echo "| world | strata tcp samples/s | strata unix samples/s | DDP samples/s | tcp / DDP | unix / DDP |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${table[@]}"
