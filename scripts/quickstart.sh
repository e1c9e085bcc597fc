#!/usr/bin/env bash
# `make quickstart`: one real run of the live Strategy-Switch on this machine — Fashion-MNIST,
# 2 workers and 1 parameter server, all-reduce first, push/pull after the empirical rule fires.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${1:-build}"
exec "${BUILD_DIR}/bin/strata" run configs/quickstart.yaml --out "runs/quickstart-$(date +%Y%m%d-%H%M%S)"
