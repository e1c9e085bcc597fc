#!/bin/bash
# Parameter-server benchmarks for docs/benchmarks.md, with the peer in the same command:
#   1. push+pull round trips: 1.1 MB (ResNet-20 size) and 25 MB models, 1/2/4 clients, P=1/2;
#      RUNS runs, median per configuration.
#   2. ASP training throughput, ResNet-20 on 28x28x1, global batch 128, 1 thread per worker:
#      strata-ps + N strata-worker processes vs PyTorch DDP (gloo) ../shared/peers/ddp_train.py,
#      alternating ours and DDP, RUNS runs each, medians and the ratio.
# Usage (from the repository root, after building strata-bench-ps, strata-ps, strata-worker,
# strata-evaluator):  flock /tmp/strata-bench.lock bench/parameter_server/run_ps_bench.sh [RUNS] [PART]
# PART: all (default), roundtrip or train.
set -euo pipefail
RUNS=${1:-3}
PART=${2:-all}
BIN=${BIN:-build/bin}
PEERS=${PEERS:-../shared/peers}
OUT=$(mktemp -d /tmp/strata-ps-bench-XXXXXX)
trap 'rm -rf "$OUT"' EXIT

median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print a[int((NR + 1) / 2)]}'; }
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }

if [[ $PART == all || $PART == roundtrip ]]; then
echo "== push+pull round trips ($RUNS runs, medians)"
for run in $(seq "$RUNS"); do
  "$BIN/strata-bench-ps" roundtrip --sizes-mb 1.1,25 --clients 1,2,4 --partitions 1,2 --iterations 30 \
    | tee -a "$OUT/roundtrip.txt"
done
printf "%-8s %-3s %-8s %12s %12s\n" size_MB P clients median_ms MB_per_s
for size in 1.10 25.00; do
  for p in 1 2; do
    for c in 1 2 4; do
      rows=$(grep "size_mb=$size partitions=$p clients=$c " "$OUT/roundtrip.txt")
      printf "%-8s %-3s %-8s %12s %12s\n" "$size" "$p" "$c" \
        "$(echo "$rows" | field median_ms | median)" "$(echo "$rows" | field MB_per_s | median)"
    done
  done
done

fi

if [[ $PART == all || $PART == train ]]; then
cat > "$OUT/resnet20.yaml" <<'EOF'
name: ps-bench-resnet20
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist }
model: { arch: resnet20 }
training: { epochs: 5, batch_size: 128, lr: 0.1, momentum: 0.9, weight_decay: 0.0001, seed: 1 }
cluster: { workers: 2, parameter_servers: 1, threads_per_worker: 1 }
strategy: { kind: ps, consistency: asp }
EOF
echo "== ASP training vs PyTorch DDP, ResNet-20 28x28x1, global batch 128 ($RUNS alternating runs)"
for run in $(seq "$RUNS"); do
  for n in 2 4; do
    "$BIN/strata-bench-ps" train --config "$OUT/resnet20.yaml" --workers "$n" --warmup-s 15 --window-s 25 \
      | tee -a "$OUT/ours-$n.txt"
    /usr/bin/python3 "$PEERS/ddp_train.py" "$n" 60 | tail -1 | tee -a "$OUT/ddp-$n.txt"
  done
done
printf "%-8s %14s %14s %8s\n" workers strata_asp_s ddp_s ratio
for n in 2 4; do
  ours=$(field samples_per_s < "$OUT/ours-$n.txt" | median)
  ddp=$(field samples_per_s < "$OUT/ddp-$n.txt" | median)
  printf "%-8s %14s %14s %8s\n" "$n" "$ours" "$ddp" "$(awk -v a="$ours" -v b="$ddp" 'BEGIN {printf "%.2f", a / b}')"
done
fi
