#!/usr/bin/env bash
# Every benchmark of docs/benchmarks.md, each with its peer in the same command, one after the
# other (never two at once: they share two cores). Takes roughly 35-45 minutes on 2 cores.
# Usage: bench/run_all.sh [BUILD_DIR]     (what `make bench` runs)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
section() { printf '\n==== %s ====\n' "$*"; }

section "codec vs memcpy"
bench/common/codec_vs_memcpy.sh "$build"
section "single-process training vs PyTorch (ResNet-20, batch 128, 2 threads)"
bench/common/compare_train.sh "$build" 5 20
section "sharding vs scikit-learn"
bench/sharder/compare_sklearn.sh 5 "$build/bin"
section "parameter server: round trips and ASP training vs DDP"
BIN="$build/bin" bench/parameter_server/run_ps_bench.sh 3 all
section "ring all-reduce vs gloo"
bench/allreduce/compare_gloo.sh "$build" 5 20
section "all-reduce training vs DDP"
bench/allreduce/compare_ddp.sh "$build" 3 20
section "live switch handover"
bench/orchestrator/switch_handover.sh "$build" 5
section "ring all-reduce vs gloo on emulated hosts (network namespaces; needs root)"
if [[ $EUID -eq 0 ]]; then
  for rate in 1gbit 10gbit; do bench/network/compare_gloo_emulated.sh "$rate" 3 20 "$build"; done
else
  echo "skipped: network namespaces need root"
fi
