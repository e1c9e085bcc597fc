#!/usr/bin/env bash
# The quickstart's two phases side by side: `strata run configs/quickstart.yaml` (2 workers, 1
# parameter server, the evaluator, a live switch from ring all-reduce to ASP push/pull) with the
# push/pull over each link, alternating in one command. Per run: samples/s of each phase
# (summary.json), their ratio, the final accuracy and the handover; then medians per link.
# Usage: bench/orchestrator/quickstart_phases.sh BUILD_DIR [RUNS] [LINKS]
#   LINKS: the strategy.ps_link values to alternate (default "tcp shm"; add grpc for the gRPC link).
# Take flock /tmp/strata-bench.lock around it, and do not run it during a build.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR="${1:-build}"
RUNS="${2:-3}"
read -r -a LINKS <<<"${3:-tcp shm}"
OUT="$(mktemp -d /tmp/strata-bench-quickstart-XXXXXX)"
trap 'rm -rf "$OUT"' EXIT
for i in $(seq 1 "$RUNS"); do
  for link in "${LINKS[@]}"; do
    "${BUILD_DIR}/bin/strata" run configs/quickstart.yaml --quiet \
      --set strategy.ps_link="$link" --out "$OUT/$link-run$i" >/dev/null
  done
done
/usr/bin/python3 - "$OUT" "$RUNS" "${LINKS[@]}" <<'PY'
import json, statistics, sys
out, runs, links = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("| ps_link | run | all-reduce samples/s | push/pull samples/s | push/pull / all-reduce | final accuracy | switch epoch | handover |")
print("|---|---|---|---|---|---|---|---|")
summary = {}
for link in links:
    rows = []
    for i in range(1, runs + 1):
        s = json.load(open(f"{out}/{link}-run{i}/summary.json"))
        rate = s.get("samples_per_s", {})
        ar, ps = rate.get("allreduce", 0.0), rate.get("ps", 0.0)
        rows.append((ar, ps, ps / ar if ar else 0.0, s.get("final_val_acc", 0.0)))
        print(f"| {link} | {i} | {ar:,.0f} | {ps:,.0f} | {rows[-1][2]:.3f} | {rows[-1][3]:.4f} | "
              f"{s.get('switch_epoch', 0):.2f} | {s.get('switch_handover_s', 0):.3f} s |")
    summary[link] = [statistics.median(r[k] for r in rows) for k in range(4)]
for link, (ar, ps, ratio, acc) in summary.items():
    print(f"{link}: medians all-reduce {ar:,.0f}, push/pull {ps:,.0f} samples/s, ratio {ratio:.3f}, "
          f"accuracy {acc:.4f}")
PY
