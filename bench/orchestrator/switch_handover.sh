#!/usr/bin/env bash
# Measures the live switch's handover (all-reduce -> parameter servers) with `strata run`:
# from worker 0 pausing at the switch step to every worker answering Switch (checkpoint written,
# servers loaded, workers pulled). Usage: bench/orchestrator/switch_handover.sh BUILD_DIR [RUNS]
# Figures: medians over RUNS runs, for 1 and 2 parameter servers.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR="${1:-build}"
RUNS="${2:-3}"
OUT="$(mktemp -d /tmp/strata-bench-handover-XXXXXX)"
for ps in 1 2; do
  for i in $(seq 1 "$RUNS"); do
    "${BUILD_DIR}/bin/strata" run bench/orchestrator/switch_handover.yaml --quiet \
      --set cluster.parameter_servers="$ps" --out "$OUT/ps$ps-run$i" >/dev/null
  done
done
/usr/bin/python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
for ps in (1, 2):
    rows = []
    for i in range(1, runs + 1):
        done = [json.loads(l) for l in open(f"{out}/ps{ps}-run{i}/events.jsonl") if '"switch_done"' in l][0]
        rows.append(done)
    med = lambda k: statistics.median(r[k] for r in rows)
    print(f"resnet20, 2 workers, {ps} parameter server(s), {runs} runs: handover median {med('handover_s'):.3f} s "
          f"(runs: {', '.join('%.3f' % r['handover_s'] for r in rows)}); checkpoint {med('checkpoint_s'):.3f} s, "
          f"load {med('load_s'):.3f} s, resume {med('resume_s'):.3f} s; weights equal: "
          f"{all(r['verification']['weights_equal'] for r in rows)}")
    # What a switch by relaunching would cost at least: a worker's start until it listens.
    starts = []
    for i in range(1, runs + 1):
        ev = [json.loads(l) for l in open(f"{out}/ps{ps}-run{i}/events.jsonl")]
        launched = {e["process"]: e["wall_s"] for e in ev if e["event"] == "launched"}
        starts += [e["wall_s"] - launched[e["process"]] for e in ev
                   if e["event"] == "listening" and e["process"].startswith("worker")]
    print(f"  reference: worker start-up (launch -> listening, LibTorch + data set) median "
          f"{statistics.median(starts):.3f} s; handover / start-up = "
          f"{med('handover_s') / statistics.median(starts):.3f}")
PY
rm -rf "$OUT"
