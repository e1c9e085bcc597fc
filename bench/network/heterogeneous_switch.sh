#!/usr/bin/env bash
# The heterogeneous Strategy-Switch study with network heterogeneity as well as CPU heterogeneity
# (docs/results.md, "... on emulated hosts"): configs/experiments/heterogeneous-network.yaml (the
# heterogeneous job's four workers at CPU speeds 1, 1, 1/2, 1/4; all-reduce, ASP, the switch by
# the empirical rule and at 30 %; three seeds) run by `strata sweep --hosts` on emulated hosts:
# the head h0 (orchestrator, evaluator), the server on h1, worker r on h(r+2), every link at RATE
# each way and worker 0's (h2) at SLOW_RATE. The CPU speeds are the job's own quotas
# (cluster.cpu), so the hosts get no CPU group. Prints the sweep's summary.csv. Needs root:
#   flock /tmp/strata-build.lock flock /tmp/strata-bench.lock \
#     bench/network/heterogeneous_switch.sh [RATE] [SLOW_RATE] [OUT] [BUILD_DIR]
set -euo pipefail
rate=${1:-1gbit}
slow=${2:-250mbit}
out=${3:-runs/sweep-heterogeneous-network}
build=$(cd "${4:-build}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
hosts_sh="$here/emulated_hosts.sh"
. "$here/emulated_bench.sh"
emulated_bench_setup nethet
"$hosts_sh" up 6 "$rate"
"$hosts_sh" rate h2 "$slow"
"$hosts_sh" hosts-file >"$work/hosts.txt"
"$hosts_sh" check
echo "$(date -u '+%Y-%m-%d %H:%M UTC'): links $rate each way, worker 0's (h2) $slow"
"$hosts_sh" exec h0 "$build/bin/strata" sweep "$repo/configs/experiments/heterogeneous-network.yaml" \
  --hosts "$work/hosts.txt" --out "$out" --report
echo "$(date -u '+%Y-%m-%d %H:%M UTC'): done"
cat "$out/summary.csv"
