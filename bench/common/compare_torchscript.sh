#!/usr/bin/env bash
# A user's TorchScript model against the built-in model it copies, side by side: the same layers,
# parameter names and initial weights (the TorchScript twin is written by real PyTorch,
# tests/support/own_model_files.py, and given the built-in model's first weights through
# `strata-evaluator --export`), trained by strata-train on the same Fashion-MNIST examples with
# the same threads. Runs alternate; per model: samples/s of the last epoch (metrics.jsonl),
# medians, and the ratio TorchScript / built-in.
# Usage: bench/common/compare_torchscript.sh BUILD_DIR [RUNS]
# Needs python3-torch and python3-numpy. Take flock /tmp/strata-bench.lock around it, and do not
# run it during a build.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR="${1:-build}"
RUNS="${2:-5}"
OUT="$(mktemp -d /tmp/strata-bench-torchscript-XXXXXX)"
trap 'rm -rf "$OUT"' EXIT
BIN="$BUILD_DIR/bin"
declare -A TRAINING=(
  [mlp]="{ epochs: 2, batch_size: 128, lr: 0.05 }"
  [resnet20]="{ epochs: 1, batch_size: 64, lr: 0.05 }"
)
declare -A MAX_TRAIN=([mlp]=30000 [resnet20]=4096)
for arch in mlp resnet20; do
  data="dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist, max_train: ${MAX_TRAIN[$arch]}, max_test: 1000 }"
  printf 'name: builtin\nmodel: { arch: %s }\n%s\ntraining: %s\n' "$arch" "$data" "${TRAINING[$arch]}" >"$OUT/$arch.yaml"
  /usr/bin/python3 tests/support/own_model_files.py model "${arch}_twin" "$OUT/$arch-twin.pt"
  printf 'name: twin\nmodel: { torchscript: %s }\n%s\ntraining: %s\n' "$OUT/$arch-twin.pt" "$data" "${TRAINING[$arch]}" >"$OUT/$arch-twin.yaml"
  "$BIN/strata-evaluator" --config "$OUT/$arch.yaml" --write-init-checkpoint "$OUT/$arch.ckpt"
  "$BIN/strata-evaluator" --config "$OUT/$arch-twin.yaml" --export "$OUT/$arch.ckpt" --out "$OUT/$arch-init.pt"
  printf 'name: twin\nmodel: { torchscript: %s }\n%s\ntraining: %s\n' "$OUT/$arch-init.pt" "$data" "${TRAINING[$arch]}" >"$OUT/$arch-twin.yaml"
  for i in $(seq 1 "$RUNS"); do
    for kind in builtin twin; do
      job="$OUT/$arch.yaml"; [[ $kind == twin ]] && job="$OUT/$arch-twin.yaml"
      "$BIN/strata-train" --config "$job" --out "$OUT/$arch-$kind-$i" --threads 2 --quiet >/dev/null
    done
  done
done
/usr/bin/python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
def last(path):
    lines = [json.loads(l) for l in open(path)]
    return lines[-1]["samples_per_s"], lines[-1]["train_loss"]
print("| model | run | built-in samples/s | TorchScript samples/s | TorchScript / built-in | train loss (built-in, TorchScript) |")
print("|---|---|---|---|---|---|")
for arch in ("mlp", "resnet20"):
    ratios, b_all, t_all = [], [], []
    for i in range(1, runs + 1):
        b, bl = last(f"{out}/{arch}-builtin-{i}/metrics.jsonl")
        t, tl = last(f"{out}/{arch}-twin-{i}/metrics.jsonl")
        b_all.append(b); t_all.append(t); ratios.append(t / b)
        print(f"| {arch} | {i} | {b:,.0f} | {t:,.0f} | {t / b:.3f} | {bl:.4f}, {tl:.4f} |")
    print(f"{arch}: medians built-in {statistics.median(b_all):,.0f}, TorchScript "
          f"{statistics.median(t_all):,.0f} samples/s; ratio of medians "
          f"{statistics.median(t_all) / statistics.median(b_all):.3f}, median of ratios "
          f"{statistics.median(ratios):.3f}")
PY
