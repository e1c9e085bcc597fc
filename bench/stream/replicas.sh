#!/usr/bin/env bash
# Stream replicas' training throughput against their number (docs/benchmarks.md, "Stream
# replicas"): R = 1, 2, 4 replicas (strategy.kind stream, MLP on Fashion-MNIST, windows of 64
# events, buffers of 4 gradients, 1 LibTorch thread each) train the same N events, produced
# beforehand onto a private redis-server so that the producer is not part of the measurement.
# Each `strata run` runs in a cgroup-v1 CPU quota of R x QUOTA cores (the replicas are identical,
# so each gets about QUOTA: the cores of this machine do not decide the scaling); the broker runs
# outside it. The counts alternate within each round; medians per count, and ratios to R = 1.
#   flock /tmp/strata-bench.lock bench/stream/replicas.sh [BUILD_DIR] [ROUNDS] [EVENTS] [QUOTA] [BUFFER] [LR_RULE]
# BUFFER: stream.max_grad_buffer (4). LR_RULE: `fixed` (training.lr 0.05 whatever R) or `scaled`
# (0.05 x R, the rule TensAIR's authors point to). Each line also gives the mean staleness of the
# gradients a replica applied from the others (0 for R = 1: it has none).
# SYNCS (default "mesh") lists the exchanges to run, alternating within each round: `mesh`
# (TensAIR's protocol), `allreduce` (stream.sync allreduce: the synchronous baseline, a ring
# all-reduce of every replica's window gradient each step) and `servers` (stream.sync servers:
# one parameter server, ASP; the run's one CPU quota grows by QUOTA cores for it, to (R + 1) x
# QUOTA pooled by replicas and server, or with SERVER_QUOTA=shared stays at R x QUOTA). With mesh
# and another, the last lines give each count's mesh events/s over it.
# A form may carry an option after the exchange: `servers-fp16` (strategy.push_compression fp16),
# `mesh-grpc` (stream.link grpc: the mesh's gradients on gRPC streams instead of its plain-TCP
# connections), `mesh-wN` (stream.max_in_flight N: at most N messages to each peer in flight and
# N waiting), `mesh-r0` (recovery.restarts 0: no counts kept on the broker after each buffer sent;
# the default 3 keeps them, for a replica started again).
# For `servers` the staleness column is the mean, over every window, of the other replicas'
# gradients the server applied between the window's model and its gradient.
# HOSTS_RATE (e.g. 1gbit) runs every count on emulated hosts instead (bench/network/
# emulated_hosts.sh: a network namespace per host, a tbf limit of HOSTS_RATE each way on each
# host's link): `strata run --hosts` on the head h0, replica r alone on host r+1, every host with
# a CPU quota of QUOTA cores, so that the gradients cross the links and the replicas keep their
# speed; the broker's socket is shared (the events do not cross the links). Under `servers` the
# server takes host 1 and replica r host r+2, each host with QUOTA cores (SERVER_QUOTA is then
# moot).
# Needs root (the cgroup) and redis-server.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "${1:-build}"); rounds=${2:-3}; events=${3:-60000}; quota=${4:-0.4}; buffer=${5:-4}; lr_rule=${6:-fixed}
counts=(1 2 4)
syncs=${SYNCS:-mesh}
out=$(mktemp -d /tmp/strata-stream-bench-XXXXXX)
cg=/sys/fs/cgroup/cpu/strata-stream-bench-$$
hosts_rate=${HOSTS_RATE:-}
emulated=bench/network/emulated_hosts.sh
export STRATA_NET_PREFIX=strata-sb$$
cleanup() {
  if [ -n "${redis_pid:-}" ]; then kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; fi
  [ -n "$hosts_rate" ] && "$emulated" down
  rmdir "$cg" 2>/dev/null || true
  rm -rf "$out"
}
trap cleanup EXIT
median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
. bench/stream/private_redis.sh
start_private_redis "$out"
mkdir -p "$cg"
period=$(cat "$cg/cpu.cfs_period_us")
if [ -n "$hosts_rate" ]; then
  awk -v q="$quota" 'BEGIN {exit !(q >= 0.1)}' ||
    { echo "with HOSTS_RATE every host's CPU quota is QUOTA cores, at least 0.1 (not $quota)" >&2; exit 2; }
  # The head, a host for the server under `servers`, and one host per replica of the largest count.
  extra=0
  [[ " $syncs " == *" servers"* ]] && extra=1
  "$emulated" up $((${counts[-1]} + 1 + extra)) "$hosts_rate" "$(awk -v q="$quota" 'BEGIN {printf "%d", q * 100}')"
  "$emulated" hosts-file > "$out/hosts.txt"
fi
for round in $(seq "$rounds"); do
  for r in "${counts[@]}"; do
   for form in $syncs; do
    sync=${form%%-*}
    push=none
    [[ $form == *-fp16 ]] && push=fp16
    link=tcp
    [[ $form == *-grpc ]] && link=grpc
    inflight=0
    [[ $form =~ -w([0-9]+) ]] && inflight=${BASH_REMATCH[1]}
    restarts=3
    [[ $form == *-r0 ]] && restarts=0
    key="bench-$round-$r-$form"
    lr=0.05
    [ "$lr_rule" = scaled ] && lr=$(awk -v r="$r" 'BEGIN {print 0.05 * r}')
    cat > "$out/job.yaml" <<YAML
name: stream-bench
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist }
model: { arch: mlp }
training: { lr: $lr, momentum: 0, threads: 1, seed: 1 }
cluster: { workers: $r }
strategy: { kind: stream, push_compression: $push }
recovery: { restarts: $restarts }
stream: { address: $out/redis.sock, key: $key, batch_events: 64, max_grad_buffer: $buffer, max_events: $events,
          sync: $sync, link: $link, max_in_flight: $inflight }
YAML
    servers=0
    [ "$sync" = servers ] && [ "${SERVER_QUOTA:-own}" = own ] && servers=1
    "$build/bin/strata" produce "$out/job.yaml" --max-events "$events" > "$out/produce.log"
    if [ -n "$hosts_rate" ]; then
      "$emulated" check
      "$emulated" exec h0 "$build/bin/strata" run "$out/job.yaml" --hosts "$out/hosts.txt" \
        --out "$out/run-$key" --quiet > "$out/run-$key.log" 2>&1 || { cat "$out/run-$key.log"; exit 1; }
    else
      echo "$(awk -v r="$((r + servers))" -v q="$quota" -v p="$period" 'BEGIN {printf "%d", r * q * p}')" \
        > "$cg/cpu.cfs_quota_us"
      (echo $BASHPID > "$cg/cgroup.procs"; exec "$build/bin/strata" run "$out/job.yaml" \
        --out "$out/run-$key" --quiet > "$out/run-$key.log" 2>&1) || { cat "$out/run-$key.log"; exit 1; }
    fi
    python3 - "$out/run-$key/summary.json" "$round" "$r" "$form" <<'PY' | tee -a "$out/all.txt"
import json, sys
s = json.load(open(sys.argv[1]))
remote = [(int(k), n) for k, n in s["staleness"].items()]
if s.get("sync") == "servers":
  # One entry per window: the others' gradients applied between its model and it.
  count = sum(n for _, n in remote)
else:
  own = s["gradients"]  # each gradient once at its own replica, at staleness 0
  count = sum(n for _, n in remote) - own
mean = sum(k * n for k, n in remote) / count if count > 0 else 0.0
print(f"round {sys.argv[2]} sync={sys.argv[4]} replicas={sys.argv[3]} events_per_s={s['events_per_s']:.0f} "
      f"remote_staleness_mean={mean:.2f} "
      f"accuracy_before_training={s['prequential_accuracy']:.4f} "
      f"agreement={s['agreement_relative']:.1e} apply_once={s['apply_once']}")
PY
    [ -n "${KEEP_SUMMARIES:-}" ] && cp "$out/run-$key/summary.json" "$KEEP_SUMMARIES/summary-$key.json"
    redis-cli -s "$out/redis.sock" del "$key" > /dev/null
   done
  done
done
echo "medians over $rounds rounds, $events events, ${quota} cores per replica, buffers of $buffer, lr $lr_rule${hosts_rate:+, one emulated host per replica at $hosts_rate}, server quota ${SERVER_QUOTA:-own}:"
first=${syncs%% *}
base=$(grep "sync=$first replicas=1 " "$out/all.txt" | sed 's/.*events_per_s=\([0-9.]*\).*/\1/' | median)
field() { grep "sync=$1 replicas=$2 " "$out/all.txt" | sed "s/.*$3=\([0-9.]*\).*/\1/" | median; }
for sync in $syncs; do
  for r in "${counts[@]}"; do
    m=$(field "$sync" "$r" events_per_s)
    a=$(field "$sync" "$r" accuracy_before_training)
    st=$(field "$sync" "$r" remote_staleness_mean)
    awk -v s="$sync" -v r="$r" -v m="$m" -v b="$base" -v a="$a" -v st="$st" -v f="$first" \
      'BEGIN {printf "sync=%s replicas=%d events_per_s=%.0f ratio_to_%s_1=%.2f accuracy_before_training=%.4f remote_staleness_mean=%.2f\n", s, r, m, f, m / b, a, st}'
  done
done
for other in ${syncs#mesh }; do
  if [[ " $syncs " == *" mesh "* && $other != mesh ]]; then
    for r in "${counts[@]}"; do
      awk -v r="$r" -v m="$(field mesh "$r" events_per_s)" -v a="$(field "$other" "$r" events_per_s)" \
        -v o="$other" 'BEGIN {printf "replicas=%d mesh_over_%s=%.2f\n", r, o, m / a}'
    done
  fi
done
