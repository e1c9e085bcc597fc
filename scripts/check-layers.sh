#!/usr/bin/env bash
# Checks that includes point inward (docs/architecture.md, "Layers"): each folder may include only
# the folders listed for it. Prints every include that breaks the rule and exits 1 if any does.
# Usage: scripts/check-layers.sh [SOURCE_DIR]
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
# What the orchestrator's subfolders may include from outside it, and from below them.
orchestrator_outside="services/common strata/v1"
below_run="orchestrator/record orchestrator/launch"
below_plan="$below_run orchestrator/run"
below_lib="$below_plan orchestrator/plan"
# folder -> what its files may include besides the folder itself (folders, or single headers)
declare -A allowed=(
  [services/common/base]=""
  [services/common/config]="services/common/base strata/v1"
  [services/common/wire]="services/common/base strata/v1"
  [services/common/ml]="services/common/base services/common/config services/common/wire strata/v1"
  [services/common/process]="services/common/base services/common/wire"
  [services/common/metrics]="services/common/base"
  # Stream events and the broker's client; the private redis-server is the one exception below.
  [services/common/stream]="services/common/base services/common/config strata/v1"
  # No LibTorch: of ml only the optimizer.
  [services/parameter_server]="services/common/base services/common/config services/common/wire services/common/metrics services/common/ml/sgd.h strata/v1"
  # The ring collective: the algorithm, its links and their wire formats; it knows no worker.
  [services/collective]="services/common strata/v1"
  [services/worker]="services/collective services/common strata/v1"
  [services/evaluator]="services/common strata/v1"
  [services/health]="services/common grpc/health"
  [sharder]="services/common/base services/common/config services/common/wire services/common/ml strata/v1"
  [orchestrator]="services/common sharder/shard_flags.h strata/v1 grpc/health"
  # Inside the orchestrator, bottom to top: record < launch < run < plan < lib < sweep < the
  # *_command.cc files (orchestrator/CMakeLists.txt says what each holds). A file in a subfolder is
  # checked against its folder's rule and against [orchestrator]: the stricter one applies.
  [orchestrator/record]="$orchestrator_outside"
  [orchestrator/launch]="$orchestrator_outside grpc/health orchestrator/record"
  [orchestrator/run]="$orchestrator_outside $below_run"
  [orchestrator/plan]="$orchestrator_outside $below_plan"
  [orchestrator/lib]="$orchestrator_outside $below_lib"
  [orchestrator/sweep]="$orchestrator_outside $below_lib orchestrator/lib"
)
# Single files allowed more than their folder: PsProcess starts strata-ps for tests and
# benchmarks (library strata_ps_process, which strata-ps does not link); the in-memory
# PartitionLink calls a PartitionStore in process, for tests (library strata_push_pull_in_memory,
# which strata-worker does not link).
declare -A exceptions=(
  [services/parameter_server/ps_process.h]="services/common/process"
  [services/parameter_server/ps_process.cc]="services/common/process"
  [services/worker/in_memory_partition_link.cc]="services/parameter_server"
  # EmbeddedBroker starts redis-server (library strata_stream_embedded, which no service links).
  [services/common/stream/embedded_broker.h]="services/common/process"
  [services/common/stream/embedded_broker.cc]="services/common/process"
)
broken=0
for folder in "${!allowed[@]}"; do
  [ -d "$folder" ] || { echo "check-layers: no folder $folder" >&2; exit 2; }
  while IFS= read -r line; do
    file=${line%%:*}
    target=$(sed -n 's/.*#include "\([^"]*\)".*/\1/p' <<<"${line#*:}")
    [ -n "$target" ] || continue
    ok=0
    for prefix in "$folder" ${allowed[$folder]} ${exceptions[$file]:-}; do
      case "$target" in "$prefix" | "$prefix"/*) ok=1 ;; esac
    done
    if [ $ok = 0 ]; then
      echo "$file includes $target: $folder may include only ${allowed[$folder]:-itself}"
      broken=1
    fi
  done < <(grep -rn --include='*.h' --include='*.cc' '#include "' "$folder" || true)
done
exit $broken
