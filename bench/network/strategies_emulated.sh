#!/usr/bin/env bash
# Push/pull against all-reduce on an emulated network (docs/benchmarks.md, "Push/pull against
# all-reduce on emulated hosts"): the same job (the quickstart's MLP on Fashion-MNIST, 4 workers,
# EPOCHS epochs of MAX_TRAIN examples) run by `strata run --hosts` in several forms: all-reduce,
# and push/pull (ASP) with 1 or 2 parameter servers, each with strategy.ps_pipeline 0 and 1, and
# with 2 servers also with whole tensors (strategy.ps_split false: form ps2-pipe0-whole). The
# hosts (emulated_hosts.sh): the head h0 (orchestrator, sharder, evaluator), then the servers,
# then one host per worker, every one at RATE each way and CPU_PERCENT of a core. The forms
# alternate within each of ROUNDS rounds; prints every run, then medians of the training
# throughput (summary.json's samples_per_s of the run's phase), the training time and the final
# accuracy, and each form's throughput over all-reduce's. Needs root:
#   flock /tmp/strata-build.lock flock /tmp/strata-bench.lock \
#     bench/network/strategies_emulated.sh RATE ROUNDS [CPU_PERCENT] [BUILD_DIR]
# Environment: EPOCHS (3), MAX_TRAIN (30000), MOMENTUM (0: with the quickstart's 0.9 on the
# servers, the pipelined forms' extra staleness makes ASP with 4 workers diverge to NaN),
# ARCH (mlp: the quickstart's model; resnet20 for one with BatchNorm), FORMS
# (the forms to run, space-separated: allreduce, allreduce-fp16 (strategy.ring_compression fp16)
# or ps<servers>-pipe<0|1>[-whole][-fp16] (-fp16: strategy.push_compression fp16)), TARGET (a validation accuracy: also print each run's seconds
# of training until it was first reached).
set -euo pipefail
rate=${1:?usage: $0 RATE ROUNDS [CPU_PERCENT] [BUILD_DIR]}
rounds=${2:-3}
cpu=${3:-28}
build=$(cd "${4:-build}" && pwd)
epochs=${EPOCHS:-3}
max_train=${MAX_TRAIN:-30000}
momentum=${MOMENTUM:-0}
arch=${ARCH:-mlp}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
hosts_sh="$here/emulated_hosts.sh"
. "$here/emulated_bench.sh"
emulated_bench_setup netstrat
# The head, 2 servers, 4 workers.
"$hosts_sh" up 7 "$rate" "$cpu"
"$hosts_sh" hosts-file >"$work/hosts.txt"

read -r -a forms <<<"${FORMS:-allreduce ps1-pipe0 ps1-pipe1 ps2-pipe0 ps2-pipe1 ps2-pipe0-whole}"
settings() {
  case $1 in
    allreduce) echo "--set strategy.kind=allreduce" ;;
    allreduce-fp16) echo "--set strategy.kind=allreduce --set strategy.ring_compression=fp16" ;;
    ps*) local servers=${1:2:1} pipe=${1:8:1} split=true push=none
      [[ $1 == *-whole* ]] && split=false
      [[ $1 == *-fp16 ]] && push=fp16
      echo "--set strategy.kind=ps --set strategy.consistency=asp --set cluster.parameter_servers=$servers --set strategy.ps_pipeline=$pipe --set strategy.ps_split=$split --set strategy.push_compression=$push" ;;
  esac
}
echo "$(date -u '+%Y-%m-%d %H:%M UTC'): $arch on fashion-mnist ($max_train examples, $epochs epochs, momentum $momentum), 4 workers, one host each, $rate each way and $cpu% of a core per host, $rounds rounds"
for round in $(seq "$rounds"); do
  for form in "${forms[@]}"; do
    out="$work/run-$round-$form"
    "$hosts_sh" check
    # shellcheck disable=SC2046
    if ! "$hosts_sh" exec h0 "$build/bin/strata" run "$repo/configs/quickstart.yaml" \
      --hosts "$work/hosts.txt" --out "$out" --quiet \
      --set cluster.workers=4 --set training.epochs="$epochs" --set dataset.max_train="$max_train" \
      --set training.lr_schedule.milestones=[] --set training.momentum="$momentum" \
      --set model.arch="$arch" \
      $(settings "$form") >"$work/$form.log" 2>&1; then
      cat "$work/$form.log" "$out"/logs/*.log 2>/dev/null | tail -40
      exit 1
    fi
    python3 - "$out" "$round" "$form" "${TARGET:-}" <<'PY' | tee -a "$work/all.txt"
import json, sys
run, target = sys.argv[1], sys.argv[4]
s = json.load(open(f"{run}/summary.json"))
rate = max(s["samples_per_s"].values())  # the run's one phase
line = (f"round {sys.argv[2]} form={sys.argv[3]} samples_per_s={rate:.0f} "
        f"training_s={s['training_s']:.1f} final_val_acc={s['final_val_acc']:.4f}")
if target:
    # Seconds from training_started to the first evaluation at or above the target accuracy.
    start = next(json.loads(l)["wall_s"] for l in open(f"{run}/events.jsonl")
                 if json.loads(l)["event"] == "training_started")
    reached = [m["wall_s"] - start for m in map(json.loads, open(f"{run}/metrics.jsonl"))
               if m.get("val_acc", 0) >= float(target)]
    line += f" to_target_s={reached[0]:.1f}" if reached else " to_target_s=never"
print(line)
PY
  done
done
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
field() { grep "form=$1 " "$work/all.txt" | sed "s/.*$2=\([0-9.]*\).*/\1/" | median; }
base=$(field allreduce samples_per_s)
echo
echo "| link | form | samples/s | x all-reduce | training s | final accuracy |"
echo "|---|---|---|---|---|---|"
for form in "${forms[@]}"; do
  awk -v r="$rate" -v f="$form" -v m="$(field "$form" samples_per_s)" -v b="$base" \
    -v t="$(field "$form" training_s)" -v a="$(field "$form" final_val_acc)" \
    'BEGIN {printf "| %s | %s | %.0f | %.2f | %.1f | %.4f |\n", r, f, m, m / b, t, a}'
done
if [[ -n ${TARGET:-} ]]; then
  echo
  echo "Seconds of training to val_acc >= $TARGET, per form (every round; never: not reached):"
  for form in "${forms[@]}"; do
    echo "$form: $(grep "form=$form " "$work/all.txt" | sed 's/.*to_target_s=\([^ ]*\).*/\1/' | tr '\n' ' ')"
  done
fi
