#!/usr/bin/env bash
# Data-parallel training throughput: Strata's all-reduce synchroniser (strata-bench-allreduce-train)
# against PyTorch DDP with gloo (../shared/peers/ddp_train.py): ResNet-20, 28x28x1 random inputs,
# global batch 128, max(1, 2/N) threads per process, N processes on one machine. Strata's ring runs
# on its TCP link (strategy.ring_link: tcp, plain TCP as between machines), on its gRPC link over
# loopback TCP and on its gRPC link over Unix sockets (the local launcher's default); the four
# alternate. Prints every run, then medians (samples/s) and the ratios to DDP.
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
  plain=(); tcp=(); unix=(); theirs=()
  for i in $(seq "$runs"); do
    p=$(ours "$world" plain-tcp)
    a=$(ours "$world" tcp)
    b=$(ours "$world" unix)
    t=$(/usr/bin/python3 "$peer" "$world" "$steps" 2>/dev/null | sed -n 's/.*samples_per_s=//p')
    echo "world=$world run $i: strata tcp link $p samples/s, strata grpc tcp $a samples/s, strata grpc unix $b samples/s, ddp $t samples/s"
    plain+=("$p"); tcp+=("$a"); unix+=("$b"); theirs+=("$t")
  done
  mp=$(median "${plain[@]}"); ma=$(median "${tcp[@]}"); mb=$(median "${unix[@]}"); mt=$(median "${theirs[@]}")
  table+=("$(awk -v w="$world" -v p="$mp" -v a="$ma" -v b="$mb" -v t="$mt" \
    'BEGIN {printf "| %d | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f |", w, p, a, b, t, p / t, a / t, b / t}')")
done
echo
echo "arch $arch"
echo "| world | tcp link | grpc tcp | grpc unix | DDP | tcp link / DDP | grpc tcp / DDP | grpc unix / DDP |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${table[@]}"
