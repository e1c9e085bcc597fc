#!/usr/bin/env bash
# Distribution-aware sharding (PCA 50 + KMeans k=20, <= 150 Lloyd steps) on Fashion-MNIST 60k:
# strata-sharder side by side with scikit-learn (../shared/peers/sklearn_shard.py), alternating
# runs in one command; then random / mod / stratified on the same 60k examples.
#
#   flock /tmp/strata-bench.lock bench/sharder/compare_sklearn.sh [RUNS] [BIN_DIR]
#
# Compared figure: the PCA + KMeans seconds each side measures around its own computation
# (data loading excluded on both sides: the peer times fit_transform + fit, we read the "pca" and
# "kmeans" phases of manifest.json). Our whole-process wall time (LibTorch start-up, reading the
# gzipped IDX files, writing the plan) is printed too.
# Both sides run with OMP_WAIT_POLICY=PASSIVE and 2 threads (LibTorch --threads 2; NumPy/OpenBLAS and
# scikit-learn's OpenMP use both cores by default): spinning OpenMP threads on a loaded 2-core
# machine cost both of them seconds (docs/sharding.md, "Threads").
set -euo pipefail
RUNS=${1:-5}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${2:-$ROOT/build/bin}
PEER=$ROOT/../shared/peers/sklearn_shard.py
DATA=/usr/share/datasets/fashion-mnist
PY=/usr/bin/python3
export OMP_WAIT_POLICY=PASSIVE
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

field() {  # field MANIFEST EXPR
  "$PY" -c "import json,sys; m=json.load(open(sys.argv[1])); print($2)" "$1"
}
median() { "$PY" -c "import statistics,sys; print('%.3f' % statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }

echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), runs=$RUNS"
ours=() ours_sampled=() ours_wall=() peer=() ours_iters=() sampled_iters=() peer_iters=()
for i in $(seq "$RUNS"); do
  t0=$(date +%s.%N)
  "$BIN/strata-sharder" --dataset fashion-mnist --data "$DATA" --workers 12 --method distribution-aware \
      --clusters 20 --pca-components 50 --max-iterations 150 --threads 2 --seed "$i" --out "$OUT/da" >/dev/null
  t1=$(date +%s.%N)
  s=$(field "$OUT/da/manifest.json" "m['seconds']['pca'] + m['seconds']['kmeans']")
  it=$(field "$OUT/da/manifest.json" "m['kmeans']['iterations']")
  ours+=("$s"); ours_iters+=("$it"); ours_wall+=("$(echo "$t1 - $t0" | bc)")
  echo "run $i strata-sharder pca+kmeans_s=$s iters=$it wall_s=${ours_wall[-1]}"

  line=$("$PY" "$PEER" 20 | tail -1)
  p=$(sed -n 's/.*total_s=\([0-9.]*\).*/\1/p' <<<"$line")
  pi=$(sed -n 's/.*iters=\([0-9]*\).*/\1/p' <<<"$line")
  peer+=("$p"); peer_iters+=("$pi")
  echo "run $i $line"

  "$BIN/strata-sharder" --dataset fashion-mnist --data "$DATA" --workers 12 --method distribution-aware \
      --clusters 20 --pca-components 50 --max-iterations 150 --threads 2 --seed "$i" \
      --pca-fit-examples 16384 --out "$OUT/da-sampled" >/dev/null
  s=$(field "$OUT/da-sampled/manifest.json" "m['seconds']['pca'] + m['seconds']['kmeans']")
  it=$(field "$OUT/da-sampled/manifest.json" "m['kmeans']['iterations']")
  ours_sampled+=("$s"); sampled_iters+=("$it")
  echo "run $i strata-sharder --pca-fit-examples 16384 pca+kmeans_s=$s iters=$it"
done
mo=$(median "${ours[@]}"); ms=$(median "${ours_sampled[@]}"); mp=$(median "${peer[@]}")
echo "median strata-sharder (PCA on all 60k)      pca+kmeans_s=$mo iters=$(median "${ours_iters[@]}") wall_s=$(median "${ours_wall[@]}")"
echo "median strata-sharder (PCA fit on 16384)    pca+kmeans_s=$ms iters=$(median "${sampled_iters[@]}")"
echo "median scikit-learn                          total_s=$mp iters=$(median "${peer_iters[@]}")"
echo "ratio strata/sklearn: exact PCA $(echo "scale=3; $mo / $mp" | bc)x, sampled PCA fit $(echo "scale=3; $ms / $mp" | bc)x (goal <= 0.5x)"

for method in random mod stratified; do
  times=()
  for i in $(seq "$RUNS"); do
    "$BIN/strata-sharder" --dataset fashion-mnist --data "$DATA" --workers 12 --method "$method" \
        --seed "$i" --out "$OUT/$method" >/dev/null
    times+=("$(field "$OUT/$method/manifest.json" "m['seconds']['plan'] * 1000")")
  done
  echo "median $method plan_ms=$(median "${times[@]}") (60000 examples, 12 workers; runs: ${times[*]})"
done
