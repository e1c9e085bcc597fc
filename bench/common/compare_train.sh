#!/usr/bin/env bash
# Single-process training throughput, Strata's Trainer against PyTorch (Debian python3-torch),
# same model (ResNet-20), batch 128, 2 threads, random 28x28x1 inputs. Runs alternate; prints
# each pair, the medians and the ratio strata / pytorch.
# Usage: bench/common/compare_train.sh [BUILD_DIR] [RUNS] [STEPS]
set -euo pipefail
build=${1:-build}; runs=${2:-5}; steps=${3:-20}
here=$(cd "$(dirname "$0")/../.." && pwd)
peer="$here/../shared/peers/ddp_train.py"
ours=(); theirs=()
for i in $(seq "$runs"); do
  o=$("$build/bin/strata-bench-train" --arch resnet20 --batch 128 --threads 2 --steps "$steps" | sed -n 's/.*samples_per_s=//p')
  t=$(/usr/bin/python3 "$peer" 1 "$steps" | sed -n 's/.*samples_per_s=//p')
  echo "run $i: strata $o samples/s, pytorch $t samples/s"
  ours+=("$o"); theirs+=("$t")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
mo=$(median "${ours[@]}"); mt=$(median "${theirs[@]}")
echo "median: strata $mo samples/s, pytorch $mt samples/s"
awk -v a="$mo" -v b="$mt" 'BEGIN {printf "ratio strata/pytorch = %.2f\n", a / b}'
