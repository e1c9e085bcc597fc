#!/usr/bin/env bash
# Kills one process of the quickstart with SIGKILL at a chosen moment and reports the run's final
# accuracy next to undisturbed runs of the same job and seed (docs/results.md, "Recovery").
#
#   bench/recovery/kill_and_compare.sh BUILD_DIR OUT_DIR CASE...
#
# CASE: none (undisturbed) | ring (worker-1 once both workers passed step 300: all-reduce, the
# ring fallback) | worker-after (worker-0, 3 s after the switch) | ps-after (ps-0, 3 s after the
# switch) | allreduce-none, allreduce-ring (the same job as a pure all-reduce job,
# strategy.kind=allreduce: undisturbed, and worker-1 killed at step 300, where the ring re-forms) |
# allreduce-resume (that job's orchestrator killed at step 2000, then `strata resume`) |
# resume-after (the quickstart's orchestrator killed 3 s after the switch, then `strata resume`).
# One line per case: its exit code and the last line of `strata run` (or of `strata resume`).
# Not a timing benchmark.
set -uo pipefail
build=${1:?usage: $0 BUILD_DIR OUT_DIR CASE...}
out=${2:?usage: $0 BUILD_DIR OUT_DIR CASE...}
shift 2
repo=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"

# Reads the run's status.json with a Python expression (exit status or a printed value).
status() {
  python3 - "$1/status.json" "$2" <<'PY'
import json, sys
try:
    s = json.load(open(sys.argv[1]))
except Exception:
    sys.exit(1)
exec(sys.argv[2])
PY
}
pid_of() { status "$1" "print([p['pid'] for p in s['processes'] if p['name'] == '$2'][0])"; }

for case in "$@"; do
  run="$out/$case-$(date +%H%M%S)"
  job=()
  [[ $case == allreduce-* ]] && job=(--set strategy.kind=allreduce)
  "$build/bin/strata" run "$repo/configs/quickstart.yaml" "${job[@]}" --out "$run" > "$run.out" 2>&1 &
  strata=$!
  case $case in
    none | allreduce-none) ;;
    ring | allreduce-ring | allreduce-resume)
      # The resume case waits past worker 0's first timed ring checkpoint (10 s), about step 1500.
      at=300
      [[ $case == allreduce-resume ]] && at=2000
      until status "$run" "w = s.get('workers', []); sys.exit(0 if len(w) == 2 and all(x.get('step', 0) >= $at for x in w) else 1)"; do
        sleep 0.5  # polling a file another process rewrites
      done
      victim=$(pid_of "$run" worker-1)
      [[ $case == allreduce-resume ]] && victim=$strata
      kill -9 "$victim" ;;
    resume-after)
      until grep -q switch_done "$run/events.jsonl" 2>/dev/null; do sleep 0.5; done
      sleep 3
      kill -9 "$strata" ;;
    worker-after | ps-after)
      until grep -q switch_done "$run/events.jsonl" 2>/dev/null; do sleep 0.5; done
      sleep 3
      victim=worker-0
      [[ $case == ps-after ]] && victim=ps-0
      kill -9 "$(pid_of "$run" "$victim")" ;;
    *) echo "unknown case $case" >&2; kill "$strata"; exit 2 ;;
  esac
  wait "$strata"
  rc=$?
  if [[ $case == *resume* ]]; then
    # The services die with their orchestrator (PR_SET_PDEATHSIG); resume once they are gone.
    while pgrep -f -- "--run-dir $run" > /dev/null; do sleep 0.2; done
    "$build/bin/strata" resume "$run" > "$run.resume.out" 2>&1
    rc=$?
    echo "$case rc=$rc $(grep '^resuming' "$run.resume.out") / $(tail -1 "$run.resume.out")"
    continue
  fi
  echo "$case rc=$rc $(tail -1 "$run.out")"
done
