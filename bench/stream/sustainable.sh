#!/usr/bin/env bash
# The sustainable throughput of stream replicas (docs/benchmarks.md, "Stream: sustainable
# throughput and Predict under load"):
# the highest event rate R replicas take without the time from an event's production to its
# training rising, for R = 1, 2 and 4, each replica held to QUOTA of a core (cgroup v1, as in
# replicas.sh; the broker and the producer run outside the quota).
#
# One `strata run` per R reads a private redis-server's stream while `strata produce --ramp`
# raises the rate from STEP events/s by STEP every HOLD seconds. metrics.jsonl has, once a
# second, the p99 of that second's production-to-training latency (`latency_p99_ms`, the worst
# replica's) and the events trained per second. A step is SUSTAINED when, over its seconds after
# the first 3 (the transition), the least-squares slope of the p99 latency is below 5 ms per
# second: at a rate the replicas cannot take, the backlog, and with it every event's wait, grows
# by (rate - capacity) / rate seconds each second, which is hundreds of ms per second even 5 %
# above capacity, while at a rate they take the latency stays at about a window's filling time.
# HOLD (10 s) leaves 7 seconds per step to fit: long enough for a 5 % overload to show a slope
# of at least 50 ms/s, short enough that the ramp fits in minutes. The sustainable rate is the
# last step sustained before the first that is not. The stream is capped (XADD MAXLEN ~ 300000)
# so that an overload does not fill the memory.
#   flock /tmp/strata-bench.lock bench/stream/sustainable.sh [BUILD_DIR] [QUOTA] [STEP] [HOLD] [STEPS_R1]
# STEPS_R1: steps for R = 1 (R replicas get R x STEPS_R1, up to 30). Then the predict phase (below);
# SUSTAINED="R1 R2 R4" runs only that phase, at 80 % of the rates given. Each step's line also
# says which limit was hit: the share of the quota's periods in which the replicas were throttled
# (near 1: the quota), and the machine's idle share (near 0: the machine, which the broker and the
# producer share). Needs root and redis-server.
# SYNC (default mesh) sets stream.sync: `allreduce` ramps the synchronous baseline instead.
# COUNTS (default "1 2 4") picks the replica counts; PREDICT_S=0 skips the predict phase.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "${1:-build}"); quota=${2:-0.4}; step=${3:-2000}; hold=${4:-10}; steps1=${5:-10}
sync=${SYNC:-mesh}; counts=${COUNTS:-1 2 4}
out=$(mktemp -d /tmp/strata-sustain-bench-XXXXXX)
cg=/sys/fs/cgroup/cpu/strata-sustain-bench-$$
cleanup() {
  [ -n "${producer_pid:-}" ] && { kill "$producer_pid" 2>/dev/null || true; wait "$producer_pid" 2>/dev/null || true; }
  if [ -n "${redis_pid:-}" ]; then kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; fi
  rmdir "$cg" 2>/dev/null || true
  rm -rf "$out"
}
trap cleanup EXIT
. bench/stream/private_redis.sh
start_private_redis "$out"
mkdir -p "$cg"
period=$(cat "$cg/cpu.cfs_period_us")
# write_job NAME R STREAM_KEYS: $out/NAME.yaml, R replicas of the MLP on the private broker.
write_job() {
  cat > "$out/$1.yaml" <<YAML
name: stream-$1
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist }
model: { arch: mlp }
training: { lr: 0.05, momentum: 0, threads: 1, seed: 1 }
cluster: { workers: $2 }
strategy: { kind: stream }
stream: { address: $out/redis.sock, batch_events: 64, max_grad_buffer: 4, sync: $sync, $3 }
YAML
}
# start_run NAME RUN R: `strata run` of $out/NAME.yaml into $out/RUN, in the cgroup at R x QUOTA
# cores, in the background (run_pid); returns once every replica trains (their progress files
# say so), when the producer may start.
start_run() {
  echo "$(awk -v r="$3" -v q="$quota" -v p="$period" 'BEGIN {printf "%d", r * q * p}')" \
    > "$cg/cpu.cfs_quota_us"
  (echo $BASHPID > "$cg/cgroup.procs"; exec "$build/bin/strata" run "$out/$1.yaml" \
    --out "$out/$2" --quiet > "$out/$2.log" 2>&1) &
  run_pid=$!
  for _ in $(seq 600); do
    n=$(grep -l '"training"' "$out/$2"/stream/replica-*.progress.json 2>/dev/null | wc -l || true)
    [ "$n" -ge "$3" ] && break
    sleep 0.2
  done
}
# SUSTAINED="R1 R2 R4" (events/s) skips the ramps and runs only the predict phase at 80 % of these.
if [ -n "${SUSTAINED:-}" ]; then
  read -r s1 s2 s4 <<< "$SUSTAINED"
  printf "replicas=1 sustainable_rate=%s\nreplicas=2 sustainable_rate=%s\nreplicas=4 sustainable_rate=%s\n" \
    "$s1" "$s2" "$s4" > "$out/all.txt"
fi
for r in $counts; do
  [ -n "${SUSTAINED:-}" ] && break
  steps=$(( steps1 * r < 30 ? steps1 * r : 30 ))
  seconds=$(( steps * hold + hold / 2 + 2 ))
  write_job "job-$r" "$r" "key: sustain-$r, max_seconds: $seconds"
  start_run "job-$r" "run-$r" "$r"
  start=$(date +%s.%N)
  "$build/bin/strata" produce "$out/job-$r.yaml" --rate "$step" --ramp "$step:$hold" \
    --max-len 300000 > "$out/produce-$r.log" 2>&1 &
  producer_pid=$!
  # Once a second: the quota's periods and throttled periods, and the machine's idle time, so that
  # each step can say whether the replicas' quota or the machine (the broker and the producer
  # share its cores) was the limit.
  (while :; do
     echo "$(date +%s.%N) $(awk '/^nr_periods|^nr_throttled/ {printf "%s ", $2}' "$cg/cpu.stat")$(awk '/^cpu / {print $5 + $6}' /proc/stat)"
     sleep 1
   done) > "$out/cpu-$r.log" &
  sampler_pid=$!
  wait "$run_pid" || { tail -20 "$out/run-$r.log"; exit 1; }
  kill "$sampler_pid" 2>/dev/null || true; wait "$sampler_pid" 2>/dev/null || true
  kill "$producer_pid" 2>/dev/null || true; wait "$producer_pid" 2>/dev/null || true; producer_pid=
  redis-cli -s "$out/redis.sock" del "sustain-$r" > /dev/null
  python3 - "$out/run-$r" "$r" "$step" "$hold" "$steps" "$start" "$out/cpu-$r.log" <<'PY' | tee -a "$out/all.txt"
import json, os, sys
run, r, step, hold, steps, start = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
cpu = [tuple(map(float, l.split())) for l in open(sys.argv[7]) if len(l.split()) == 4]
hz = os.sysconf("SC_CLK_TCK"); cores = os.cpu_count()
def cpu_between(a, b):  # Unix times: the share of quota periods throttled, the machine's idle share
    w = [c for c in cpu if a <= c[0] <= b]
    if len(w) < 2: return float("nan"), float("nan")
    periods, throttled = w[-1][1] - w[0][1], w[-1][2] - w[0][2]
    idle = (w[-1][3] - w[0][3]) / hz / (w[-1][0] - w[0][0]) / cores
    return (throttled / periods if periods else float("nan")), idle
lines = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
# metrics' wall_s counts from the run's start; each event has both its Unix time and its wall_s,
# so the ramp, started at Unix time `start`, began at wall_s `offset`.
first = json.loads(open(os.path.join(run, "events.jsonl")).readline())
offset = start - (first["time"] - first["wall_s"])
def slope(points):
    n = len(points)
    if n < 3: return float("nan")
    mx = sum(x for x, _ in points) / n; my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else float("nan")
sustained, first_failed = 0.0, None
for k in range(steps):
    lo, hi = offset + k * hold + 3, offset + (k + 1) * hold
    sel = [m for m in lines if lo <= m.get("wall_s", -1) < hi and "latency_p99_ms" in m]
    # Only whole steps: the run went on past the step's end.
    if len(sel) < 3 or not any(m.get("wall_s", -1) >= hi for m in lines): break
    p99 = [(m["wall_s"], m["latency_p99_ms"]) for m in sel]
    s = slope(p99)
    trained = sum(m.get("trained_per_s", 0) for m in sel) / len(sel)
    # What arrived: handed out plus not yet handed out (the group's lag; -1 when Redis cannot
    # tell, after the cap trimmed entries the group had not read).
    arrived = [(m["wall_s"], m["handed_out"] + m["lag"]) for m in sel
               if m.get("lag", -1) >= 0 and "handed_out" in m]
    produced = ((arrived[-1][1] - arrived[0][1]) / (arrived[-1][0] - arrived[0][0])
                if len(arrived) >= 2 and arrived[-1][0] > arrived[0][0] else float("nan"))
    rate = step * (k + 1)
    ok = s < 5.0
    unix0 = start - offset  # the Unix time of wall_s 0
    throttled, idle = cpu_between(unix0 + lo, unix0 + hi)
    print(f"replicas={r} step_rate={rate:.0f} produced_per_s={produced:.0f} trained_per_s={trained:.0f} "
          f"latency_p99_ms={sorted(y for _, y in p99)[len(p99) // 2]:.0f} p99_slope_ms_per_s={s:.1f} "
          f"quota_throttled={throttled:.2f} machine_idle={idle:.2f} "
          f"{'sustained' if ok else 'NOT_sustained'}")
    if ok and first_failed is None: sustained = rate
    if not ok and first_failed is None: first_failed = rate
print(f"replicas={r} sustainable_rate={sustained:.0f}")
PY
done
# Predict under load: each R again, at 80 % of its sustainable rate for PREDICT_S seconds, with
# 1 % of the events sent to Predict as they arrive (stream.predict_rate: 0.01); the latency of
# the answers as the orchestrator, the caller, saw them.
predict_s=${PREDICT_S:-40}
for r in $counts; do
  [ "$predict_s" -gt 0 ] || break
  sustained=$(grep "replicas=$r sustainable_rate" "$out/all.txt" | sed 's/.*=//')
  rate=$(awk -v s="$sustained" 'BEGIN {printf "%d", 0.8 * s}')
  [ "$rate" -gt 0 ] || continue
  write_job "predict-$r" "$r" "key: predict-$r, max_seconds: $predict_s, predict_rate: 0.01"
  start_run "predict-$r" "predict-run-$r" "$r"
  "$build/bin/strata" produce "$out/predict-$r.yaml" --rate "$rate" --max-len 300000 \
    > "$out/produce-predict-$r.log" 2>&1 &
  producer_pid=$!
  wait "$run_pid" || { tail -20 "$out/predict-run-$r.log"; exit 1; }
  kill "$producer_pid" 2>/dev/null || true; wait "$producer_pid" 2>/dev/null || true; producer_pid=
  redis-cli -s "$out/redis.sock" del "predict-$r" > /dev/null
  python3 - "$out/predict-run-$r/summary.json" "$r" "$rate" <<'PY' | tee -a "$out/all.txt"
import json, sys
s = json.load(open(sys.argv[1]))
p = s.get("predictions", {})
lat = max((x.get("latency", {}).get("p99_ms", 0) for x in s["per_replica"]), default=0)
print(f"replicas={sys.argv[2]} rate={sys.argv[3]} predict_answered={p.get('answered', 0)} "
      f"predict_failed={p.get('failed', 0)} predict_p50_ms={p.get('p50_ms', 0):.2f} "
      f"predict_p99_ms={p.get('p99_ms', 0):.2f} predict_max_ms={p.get('max_ms', 0):.2f} "
      f"predict_accuracy={p.get('accuracy', 0):.4f} training_latency_p99_ms={lat:.0f}")
PY
done
echo "sustainable rates (stream.sync $sync, quota $quota core per replica, steps of $step events/s held $hold s):"
grep sustainable_rate "$out/all.txt"
base=$(grep "replicas=1 sustainable_rate" "$out/all.txt" | sed 's/.*=//')
[[ " $counts " == *" 1 "* ]] || exit 0
for r in $counts; do
  [ "$r" -gt 1 ] || continue
  v=$(grep "replicas=$r sustainable_rate" "$out/all.txt" | sed 's/.*=//')
  awk -v r="$r" -v v="$v" -v b="$base" 'BEGIN {printf "replicas=%d ratio_to_1=%.2f\n", r, (b > 0 ? v / b : 0)}'
done
