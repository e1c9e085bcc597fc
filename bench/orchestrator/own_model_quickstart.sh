#!/usr/bin/env bash
# The quickstart with the built-in MLP against the same job with a user's TorchScript MLP on the
# same examples as .npy files (examples/your-own-model: the model normalises its own input),
# alternating in one command: final accuracy, switch epoch and the phases' samples/s of each run,
# then medians and the accuracy difference in points.
# Usage: bench/orchestrator/own_model_quickstart.sh BUILD_DIR [RUNS]
# Needs python3-torch and python3-numpy. Take flock /tmp/strata-bench.lock around it, and do not
# run it during a build.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR="${1:-build}"
RUNS="${2:-3}"
OUT="$(mktemp -d /tmp/strata-bench-own-XXXXXX)"
trap 'rm -rf "$OUT"' EXIT
/usr/bin/python3 examples/your-own-model/make_model_and_data.py --out "$OUT/own" >/dev/null
for i in $(seq 1 "$RUNS"); do
  "$BUILD_DIR/bin/strata" run configs/quickstart.yaml --quiet --out "$OUT/builtin-$i" >/dev/null
  "$BUILD_DIR/bin/strata" run examples/your-own-model/job.yaml --quiet --out "$OUT/own-$i" \
    --set model.torchscript="$OUT/own/net.pt" --set dataset.path="$OUT/own/data" >/dev/null
done
/usr/bin/python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
print("| model | run | final accuracy | switch epoch | all-reduce samples/s | push/pull samples/s |")
print("|---|---|---|---|---|---|")
acc = {}
for kind in ("builtin", "own"):
    acc[kind] = []
    for i in range(1, runs + 1):
        s = json.load(open(f"{out}/{kind}-{i}/summary.json"))
        r = s.get("samples_per_s", {})
        acc[kind].append(s["final_val_acc"])
        print(f"| {kind} | {i} | {s['final_val_acc']:.4f} | {s.get('switch_epoch') or 0:.2f} | "
              f"{r.get('allreduce', 0):,.0f} | {r.get('ps', 0):,.0f} |")
b, o = statistics.median(acc["builtin"]), statistics.median(acc["own"])
print(f"medians: built-in MLP {b:.4f}, TorchScript MLP {o:.4f}; difference {100 * (o - b):+.2f} points")
PY
