#!/usr/bin/env bash
# Recovery from a concept drift (docs/results.md, "Online learning from a stream", drift): a
# Fashion-MNIST stream (MLP, lr 0.05, windows of 64 events, buffers of 4) whose labels are
# permuted from event AT on (stream.produce.drift), trained by R = 1 and 2 replicas that keep
# training, against the same replicas frozen at the drift (stream.freeze_at_event = AT: every
# later window scored, none trained), for SEEDS seeds (training.seed: the model's first weights
# and the permutation). Each run is one `strata run` with its own broker and producer (rate 0: as
# fast as the broker takes the events; the figures are in events, not seconds).
#
# Read by the run itself (summary.json's drift_recovery, from each replica's accuracy curve: its
# test-then-train accuracy over its latest 1,000 events, a point every 1,000 events):
#   level     the mean of its last 5 points before the drift (its latest 5,000 events);
#   recovered the first point, after the curve has fallen more than 1 point below the level, that
#             is back within 1 point of it; events to recover = that point's seq - AT (events of
#             the whole stream, all replicas together). A curve that never comes back: "never".
# A run's figure is the median over its replicas; a configuration's, the median over the seeds.
#   flock /tmp/strata-bench.lock bench/stream/drift.sh [BUILD_DIR] [SEEDS] [AT] [EVENTS]
# MODES (default "keep frozen") picks the configurations; two more compare the reactions to a
# drift with a decaying rate (stream.lr_decay_events = DECAY, default 20000):
#   decay  keeps training at the decayed rate (stream.on_drift: continue);
#   reset  restarts the decay when the replica's detector fires (stream.on_drift: reset_lr).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "${1:-build}"); seeds=${2:-3}; at=${3:-100000}; events=${4:-240000}
modes=${MODES:-keep frozen}; decay=${DECAY:-20000}
out=$(mktemp -d /tmp/strata-drift-bench-XXXXXX)
trap 'rm -rf "$out"' EXIT
for seed in $(seq "$seeds"); do
  for r in 1 2; do
    for mode in $modes; do
      freeze=0 lr_decay=0 on_drift=continue
      [ "$mode" = frozen ] && freeze=$at
      [ "$mode" = decay ] && lr_decay=$decay
      [ "$mode" = reset ] && lr_decay=$decay on_drift=reset_lr
      name="drift-r$r-$mode-s$seed"
      cat > "$out/$name.yaml" <<YAML
name: $name
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist }
model: { arch: mlp }
training: { lr: 0.05, momentum: 0, threads: 1, seed: $seed }
cluster: { workers: $r }
strategy: { kind: stream }
stream: { batch_events: 64, max_grad_buffer: 4, max_events: $events, freeze_at_event: $freeze,
          lr_decay_events: $lr_decay, on_drift: $on_drift,
          produce: { drift: { at_event: $at, permute_labels: true } } }
YAML
      "$build/bin/strata" run "$out/$name.yaml" --out "$out/$name" --quiet > "$out/$name.log" 2>&1 \
        || { cat "$out/$name.log"; exit 1; }
      python3 - "$out/$name/summary.json" "$at" "$seed" "$r" "$mode" <<'PY' | tee -a "$out/all.txt"
import json, statistics, sys
s = json.load(open(sys.argv[1]))
# The run's own reading (summary.json's drift_recovery, docs/user-guide.md): medians over the
# replicas, events_to_recover null when half of them or more never came back.
d = s["drift_recovery"]
rec = d["events_to_recover"]
print(f"seed={sys.argv[3]} replicas={sys.argv[4]} mode={sys.argv[5]} "
      f"level_before={d['level_before']:.4f} "
      f"events_to_recover={'never' if rec is None else int(rec)} "
      f"final_accuracy={d['final_accuracy']:.4f} "
      f"prequential_accuracy={s['prequential_accuracy']:.4f} "
      f"drifts_detected={len(s['drifts'])} "
      f"lr_end={statistics.median(rep.get('lr', 0) for rep in s['per_replica']):.5f} "
      f"agree={s['agree']} apply_once={s['apply_once']}")
PY
    done
  done
done
echo "medians over $seeds seeds; labels permuted from event $at of $events:"
python3 - "$out/all.txt" "$modes" <<'PY'
import re, statistics, sys
rows = [dict(re.findall(r"(\w+)=(\S+)", line)) for line in open(sys.argv[1])]
for r in ("1", "2"):
    for mode in sys.argv[2].split():
        sel = [x for x in rows if x["replicas"] == r and x["mode"] == mode]
        rec = [x["events_to_recover"] for x in sel]
        known = sorted(int(v) for v in rec if v != "never")
        median = statistics.median(known) if len(known) * 2 > len(rec) else "never"
        print(f"replicas={r} mode={mode} events_to_recover={median} (per seed: {' '.join(rec)}) "
              f"level_before={statistics.median(float(x['level_before']) for x in sel):.4f} "
              f"final_accuracy={statistics.median(float(x['final_accuracy']) for x in sel):.4f}")
PY
