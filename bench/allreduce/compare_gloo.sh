#!/usr/bin/env bash
# Ring all-reduce bandwidth, Strata (strata-bench-allreduce) against PyTorch's gloo
# (../shared/peers/gloo_allreduce.py, Debian python3-torch), on one machine. For world 2 and 4 and
# 1 MB, 4 MB, 25 MB buffers, four runs alternate RUNS times: Strata's TCP link (segments on plain
# TCP, the path between machines with strategy.ring_link: tcp), Strata's gRPC link over loopback
# TCP, Strata's gRPC link over abstract Unix sockets (the local launcher's default) and gloo
# (loopback TCP). Prints every run, then a table of medians (busbw in MB/s) and the ratios to gloo.
# Run it under the benchmark lock:
#   flock /tmp/strata-bench.lock bench/allreduce/compare_gloo.sh [BUILD_DIR] [RUNS] [ITERS]
set -euo pipefail
build=${1:-build}; runs=${2:-5}; iters=${3:-20}
here=$(cd "$(dirname "$0")/../.." && pwd)
peer="$here/../shared/peers/gloo_allreduce.py"
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ours() { "$build/bin/strata-bench-allreduce" --world "$1" --floats "$2" --iters "$iters" --transport "$3" | sed -n 's/^busbw_MBps=//p'; }
table=()
for world in 2 4; do
  for floats in 262144 1048576 6553600; do
    plain=(); tcp=(); unix=(); theirs=()
    for i in $(seq "$runs"); do
      p=$(ours "$world" "$floats" plain-tcp)
      a=$(ours "$world" "$floats" tcp)
      b=$(ours "$world" "$floats" unix)
      t=$(/usr/bin/python3 "$peer" "$world" "$floats" "$iters" 2>/dev/null | sed -n 's/.*busbw_MBps=//p')
      echo "world=$world floats=$floats run $i: strata tcp link $p MB/s, strata grpc tcp $a MB/s, strata grpc unix $b MB/s, gloo $t MB/s"
      plain+=("$p"); tcp+=("$a"); unix+=("$b"); theirs+=("$t")
    done
    mp=$(median "${plain[@]}"); ma=$(median "${tcp[@]}"); mb=$(median "${unix[@]}"); mt=$(median "${theirs[@]}")
    table+=("$(awk -v w="$world" -v f="$floats" -v p="$mp" -v a="$ma" -v b="$mb" -v t="$mt" \
      'BEGIN {printf "| %d | %g MiB | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f |", w, f * 4 / 1048576, p, a, b, t, p / t, a / t, b / t}')")
  done
done
echo
echo "| world | buffer | tcp link | grpc tcp | grpc unix | gloo (tcp) | tcp link / gloo | grpc tcp / gloo | grpc unix / gloo |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${table[@]}"
