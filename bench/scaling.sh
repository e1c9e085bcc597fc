#!/usr/bin/env bash
# Scaling curves for docs/benchmarks.md: training samples/s against the number of workers for ring
# all-reduce (strata-bench-allreduce-train: N processes, ring over the plain TCP link as strata-worker
# uses it by default, random 1x28x28 inputs)
# and for ASP push/pull (strata-bench-ps train: 1 strata-ps and N strata-worker processes on
# Fashion-MNIST), then ASP against the number of parameter servers at a fixed worker count. Global
# batch 128 split over the workers, 1 LibTorch thread per worker. The points of one round run one
# after the other and the rounds repeat; medians per point.
#   flock /tmp/strata-bench.lock bench/scaling.sh [BUILD_DIR] [ROUNDS] [ARCH] [PS_WORKERS]
# ARCH: mlp (default) or any model.arch; PS_WORKERS: the worker count of the server curve (2).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}; rounds=${2:-3}; arch=${3:-mlp}; ps_workers=${4:-2}
workers=(1 2 4 8); servers=(1 2 4)
out=$(mktemp -d /tmp/strata-scaling-XXXXXX)
trap 'rm -rf "$out"' EXIT
median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
rate() { sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p' | tail -1; }
cat > "$out/job.yaml" <<EOF
name: scaling
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist }
model: { arch: $arch }
training: { epochs: 50, batch_size: 128, lr: 0.05, momentum: 0.9, seed: 1 }
cluster: { workers: 2, parameter_servers: 1, threads_per_worker: 1 }
strategy: { kind: ps, consistency: asp }
EOF
for round in $(seq "$rounds"); do
  for n in "${workers[@]}"; do
    r=$("$build/bin/strata-bench-allreduce-train" --arch "$arch" --world "$n" --steps 40 \
        --transport plain-tcp | rate)
    echo "round $round allreduce workers=$n samples_per_s=$r" | tee -a "$out/all.txt"
    r=$("$build/bin/strata-bench-ps" train --config "$out/job.yaml" --workers "$n" --partitions 1 \
        --warmup-s 5 --window-s 10 --bin-dir "$build/bin" | rate)
    echo "round $round asp workers=$n servers=1 samples_per_s=$r" | tee -a "$out/all.txt"
  done
  for p in "${servers[@]}"; do
    [ "$p" = 1 ] && continue  # the worker curve measured it
    r=$("$build/bin/strata-bench-ps" train --config "$out/job.yaml" --workers "$ps_workers" \
        --partitions "$p" --warmup-s 5 --window-s 10 --bin-dir "$build/bin" | rate)
    echo "round $round asp workers=$ps_workers servers=$p samples_per_s=$r" | tee -a "$out/all.txt"
  done
done
pick() { grep -F "$1 samples_per_s=" "$out/all.txt" | rate_all | median; }
rate_all() { sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p'; }
echo
echo "arch $arch, global batch 128, medians of $rounds rounds (samples/s)"
echo "| workers | all-reduce | ASP, 1 server | ASP / all-reduce |"
echo "|---|---|---|---|"
for n in "${workers[@]}"; do
  a=$(pick "allreduce workers=$n"); s=$(pick "asp workers=$n servers=1")
  awk -v n="$n" -v a="$a" -v s="$s" 'BEGIN {printf "| %d | %.0f | %.0f | %.2f |\n", n, a, s, s / a}'
done
echo
echo "| servers (ASP, $ps_workers workers) | samples/s |"
echo "|---|---|"
for p in "${servers[@]}"; do
  printf '| %d | %.0f |\n' "$p" "$(pick "asp workers=$ps_workers servers=$p")"
done
