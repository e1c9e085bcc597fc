#!/usr/bin/env bash
# Checks that includes point inward (docs/architecture.md, "Layers"): each folder may include only
# the folders listed for it. Prints every include that breaks the rule and exits 1 if any does.
# Usage: scripts/check-layers.sh [SOURCE_DIR]
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
# folder -> the folders (besides itself) its files may include
declare -A allowed=(
  [services/common/base]=""
  [services/common/config]="services/common/base"
  [services/common/wire]="services/common/base"
  [services/common/ml]="services/common/base services/common/config services/common/wire"
  [services/common/process]="services/common/base services/common/wire"
  [services/parameter_server]="services/common/base services/common/config services/common/wire services/common/ml proto"
  [services/sharder]="services/common/base services/common/config services/common/wire services/common/ml services/common/process proto"
  [services/worker]="services/common services/parameter_server proto"
  [services/evaluator]="services/common proto"
)
broken=0
for folder in "${!allowed[@]}"; do
  [ -d "$folder" ] || { echo "check-layers: no folder $folder" >&2; exit 2; }
  while IFS= read -r line; do
    file=${line%%:*}
    target=$(sed -n 's/.*#include "\([^"]*\)".*/\1/p' <<<"${line#*:}")
    [ -n "$target" ] || continue
    ok=0
    for prefix in "$folder" ${allowed[$folder]}; do
      case "$target" in "$prefix"/*) ok=1 ;; esac
    done
    if [ $ok = 0 ]; then
      echo "$file includes $target: $folder may include only ${allowed[$folder]:-itself}"
      broken=1
    fi
  done < <(grep -rn --include='*.h' --include='*.cc' '#include "' "$folder" || true)
done
exit $broken
