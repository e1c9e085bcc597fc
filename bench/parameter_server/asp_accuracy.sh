#!/bin/bash
# ASP accuracy vs single-node training, same job and number of epochs (docs/benchmarks.md):
# strata-train once (deterministic), then `strata run` with strategy ps/asp (real strata-ps and
# strata-worker processes, 1 parameter server, per-worker lr = lr / n) with 2 and 4 workers, RUNS
# times each (asynchronous runs differ from run to run). Prints final validation accuracies and
# the gap to single-node in points.
# Usage: flock /tmp/strata-bench.lock bench/parameter_server/asp_accuracy.sh [RUNS] [EPOCHS]
set -euo pipefail
RUNS=${1:-3}
EPOCHS=${2:-5}
BIN=${BIN:-build/bin}
OUT=$(mktemp -d /tmp/strata-asp-accuracy-XXXXXX)
trap 'rm -rf "$OUT"' EXIT
cat > "$OUT/job.yaml" <<EOF
name: ps-asp-accuracy
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist }
model: { arch: mlp }
training: { epochs: $EPOCHS, batch_size: 128, lr: 0.05, momentum: 0.9, weight_decay: 0.0001, seed: 1, threads: 2 }
cluster: { workers: 2, parameter_servers: 1, threads_per_worker: 1 }
sharding: { method: stratified }
strategy: { kind: ps, consistency: asp }
launcher: { kind: local }
EOF
acc() { sed -n 's/.*final val_acc \([0-9.]*\).*/\1/p'; }
single=$("$BIN/strata-train" --config "$OUT/job.yaml" --out "$OUT/single" --quiet | acc)
echo "single-node: val_acc $single"
for n in 2 4; do
  for run in $(seq "$RUNS"); do
    a=$("$BIN/strata" run "$OUT/job.yaml" --out "$OUT/asp-$n-$run" --set cluster.workers=$n --bin-dir "$BIN" --quiet | acc)
    echo "asp workers=$n run=$run: val_acc $a gap_points $(awk -v a="$a" -v s="$single" 'BEGIN {printf "%.2f", (s - a) * 100}')"
  done
done
