#!/usr/bin/env bash
# What the mesh's recovery costs a stream job's accuracy (docs/results.md, "Online learning from a
# stream", recovery): the same stream (three replicas of the MLP on Fashion-MNIST, windows of 64
# events, buffers of 4, N events produced beforehand onto a private redis-server) trained
# undisturbed, and with replica 1 killed by SIGKILL once it has trained KILL_AT windows (the run
# starts it again: docs/user-guide.md, "A replica that dies"). The two alternate within each
# round; each line gives the test-then-train accuracy over the whole stream, the events trained,
# the restarts, the windows lost with the dead replica, whether apply-once held and how far the
# replicas' parameters are apart.
#   flock /tmp/strata-bench.lock bench/stream/kill_replica.sh [BUILD_DIR] [ROUNDS] [EVENTS] [KILL_AT]
# Needs redis-server.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "${1:-build}"); rounds=${2:-3}; events=${3:-60000}; kill_at=${4:-100}
out=$(mktemp -d /tmp/strata-stream-kill-XXXXXX)
cleanup() {
  if [ -n "${redis_pid:-}" ]; then kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; fi
  rm -rf "$out"
}
trap cleanup EXIT
median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
. bench/stream/private_redis.sh
start_private_redis "$out"
for round in $(seq "$rounds"); do
  for form in undisturbed killed; do
    key="kill-$round-$form"
    cat > "$out/job.yaml" <<YAML
name: stream-kill
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist }
model: { arch: mlp }
training: { lr: 0.05, momentum: 0, threads: 1, seed: $round }
cluster: { workers: 3 }
strategy: { kind: stream }
stream: { address: $out/redis.sock, key: $key, batch_events: 64, max_grad_buffer: 4, max_events: $events }
YAML
    "$build/bin/strata" produce "$out/job.yaml" --max-events "$events" > "$out/produce.log"
    run="$out/run-$key"
    "$build/bin/strata" run "$out/job.yaml" --out "$run" --quiet > "$out/run-$key.log" 2>&1 &
    strata=$!
    if [ "$form" = killed ]; then
      # Replica 1's pid from the run's events, then its progress file (written about once a
      # second) until it has trained KILL_AT windows; then SIGKILL. Polling files, at most 5 min.
      python3 - "$run" "$kill_at" <<'PY'
import json, os, signal, sys, time
run, kill_at = sys.argv[1], int(sys.argv[2])
until = time.time() + 300
def pid():
  try:
    for line in open(f"{run}/events.jsonl"):
      e = json.loads(line)
      if e.get("process") == "worker-1" and "pid" in e: return e["pid"]
  except (OSError, ValueError): pass
  return None
def windows():
  try: return json.load(open(f"{run}/stream/replica-1.progress.json")).get("windows", 0)
  except (OSError, ValueError): return 0
while time.time() < until and (pid() is None or windows() < kill_at): time.sleep(0.05)
os.kill(pid(), signal.SIGKILL)
PY
    fi
    wait "$strata" || { cat "$out/run-$key.log"; exit 1; }
    python3 - "$run/summary.json" "$round" "$form" <<'PY' | tee -a "$out/all.txt"
import json, sys
s = json.load(open(sys.argv[1]))
print(f"round {sys.argv[2]} form={sys.argv[3]} prequential_accuracy={s['prequential_accuracy']:.4f} "
      f"events_trained={s['events_trained']} restarts={s.get('replica_restarts', 0)} "
      f"lost_windows={s.get('lost_windows', 0)} apply_once={s['apply_once']} "
      f"agreement={s['agreement_relative']:.1e} events_per_s={s['events_per_s']:.0f}")
PY
    redis-cli -s "$out/redis.sock" del "$key" > /dev/null
  done
done
echo "medians over $rounds rounds, $events events, replica 1 killed after $kill_at windows:"
for form in undisturbed killed; do
  a=$(grep "form=$form " "$out/all.txt" | sed 's/.*prequential_accuracy=\([0-9.]*\).*/\1/' | median)
  e=$(grep "form=$form " "$out/all.txt" | sed 's/.*events_per_s=\([0-9.]*\).*/\1/' | median)
  echo "form=$form prequential_accuracy=$a events_per_s=$e"
done
