#!/usr/bin/env bash
# The same job run by the local launcher (child processes on this machine) and as a docker-compose
# project (every service in a container with its own network namespace; the ring and push/pull
# over TCP between containers), alternating, RUNS rounds. Prints per launcher the medians of the
# command's wall time (what a user waits, container start-up included), the training time, the
# samples/s of each phase and the switch's handover, and compose / local ratios.
#
#   bench/orchestrator/compose_vs_local.sh BUILD_DIR [RUNS] [JOB]
#
# Needs a Docker daemon (DOCKER_HOST) holding the image strata:latest, e.g.
#   scripts/docker-daemon.sh start /tmp/strata-docker && eval "$(scripts/docker-daemon.sh env /tmp/strata-docker)"
#   scripts/make-image.sh --prebuilt build/bin
# Take the bench lock around it and run it on an idle machine (docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR="${1:-build}"
RUNS="${2:-3}"
JOB="${3:-configs/quickstart.yaml}"
OUT="$(mktemp -d /tmp/strata-bench-compose-XXXXXX)"
for i in $(seq 1 "$RUNS"); do
  for launcher in local compose; do
    start=$(date +%s.%N)
    "${BUILD_DIR}/bin/strata" run "$JOB" --quiet --set launcher.kind="$launcher" \
      --out "$OUT/$launcher-$i" >"$OUT/$launcher-$i.out" 2>&1 \
      || { echo "run $launcher-$i failed:"; tail -20 "$OUT/$launcher-$i.out"; exit 1; }
    end=$(date +%s.%N)
    echo "$start $end" >"$OUT/$launcher-$i.time"
  done
done
/usr/bin/python3 - "$OUT" "$RUNS" "$JOB" <<'PY'
import json, statistics, sys
out, runs, job = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def row(launcher, i):
    s = json.load(open(f"{out}/{launcher}-{i}/summary.json"))
    t0, t1 = map(float, open(f"{out}/{launcher}-{i}.time").read().split())
    rates = s.get("samples_per_s") or {}
    return {"command_s": t1 - t0, "training_s": s["training_s"],
            "allreduce": rates.get("allreduce"), "ps": rates.get("ps"),
            "handover_s": s.get("switch_handover_s"), "acc": s["final_val_acc"]}
med = {}
print(f"{job}, {runs} alternating rounds (medians; runs in {out})")
for launcher in ("local", "compose"):
    rows = [row(launcher, i) for i in range(1, runs + 1)]
    med[launcher] = {k: statistics.median(r[k] for r in rows if r[k] is not None)
                     for k in rows[0] if any(r[k] is not None for r in rows)}
    m = med[launcher]
    print(f"  {launcher:8s} command {m['command_s']:6.1f} s  training {m['training_s']:6.1f} s  "
          f"all-reduce {m.get('allreduce', 0):7.0f} samples/s  push/pull {m.get('ps', 0):7.0f} "
          f"samples/s  handover {m.get('handover_s', 0):.3f} s  accuracy {m['acc']:.4f}")
l, c = med["local"], med["compose"]
print("  compose / local: command %.2fx, training %.2fx, all-reduce rate %.2fx, push/pull rate "
      "%.2fx, handover %.2fx" % (c["command_s"] / l["command_s"], c["training_s"] / l["training_s"],
                                c["allreduce"] / l["allreduce"], c["ps"] / l["ps"],
                                c["handover_s"] / l["handover_s"]))
PY
