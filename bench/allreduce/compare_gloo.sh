#!/usr/bin/env bash
# Ring all-reduce bandwidth, Strata (strata-bench-allreduce) against PyTorch's gloo
# (../shared/peers/gloo_allreduce.py, Debian python3-torch), on loopback. For world 2 and 4 and
# 1 MB, 4 MB, 25 MB buffers, the two alternate RUNS times; prints every pair, then a table of
# medians (busbw in MB/s) and the ratio strata / gloo. Run it under the benchmark lock:
#   flock /tmp/strata-bench.lock bench/allreduce/compare_gloo.sh [BUILD_DIR] [RUNS] [ITERS]
set -euo pipefail
build=${1:-build}; runs=${2:-5}; iters=${3:-20}
here=$(cd "$(dirname "$0")/../.." && pwd)
peer="$here/../shared/peers/gloo_allreduce.py"
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
table=()
for world in 2 4; do
  for floats in 262144 1048576 6553600; do
    ours=(); theirs=()
    for i in $(seq "$runs"); do
      o=$("$build/bin/strata-bench-allreduce" --world "$world" --floats "$floats" --iters "$iters" | sed -n 's/^busbw_MBps=//p')
      t=$(/usr/bin/python3 "$peer" "$world" "$floats" "$iters" 2>/dev/null | sed -n 's/.*busbw_MBps=//p')
      echo "world=$world floats=$floats run $i: strata $o MB/s, gloo $t MB/s"
      ours+=("$o"); theirs+=("$t")
    done
    mo=$(median "${ours[@]}"); mt=$(median "${theirs[@]}")
    table+=("$(awk -v w="$world" -v f="$floats" -v a="$mo" -v b="$mt" \
      'BEGIN {printf "| %d | %g MiB | %.0f | %.0f | %.2f |", w, f * 4 / 1048576, a, b, a / b}')")
  done
done
echo
echo "| world | buffer | strata busbw MB/s (median) | gloo busbw MB/s (median) | ratio strata/gloo |"
echo "|---|---|---|---|---|"
printf '%s\n' "${table[@]}"
