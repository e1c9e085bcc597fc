#!/usr/bin/env bash
# Installs the Debian packages Strata needs, only those that are missing, so a second run costs
# a dpkg query and nothing else. The list is the verified stack of docs/building.md.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libtorch-dev libopenblas0-openmp libabsl-dev libspdlog-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev libcli11-dev nlohmann-json3-dev
  dataset-fashion-mnist
)
# Peers for side-by-side benchmarks and the tests that compare against them.
if [[ "${STRATA_WITH_PEERS:-0}" == 1 ]]; then
  packages+=(python3-torch python3-sklearn)
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${#missing[@]} missing packages: ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
