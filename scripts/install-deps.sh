#!/usr/bin/env bash
# Installs the Debian packages Strata needs, only those that are missing, so a second run costs
# a dpkg query and nothing else. The list is the verified stack of docs/building.md.
#
#   install-deps.sh quickstart   what `make quickstart` needs: the compilers and libraries, the
#                                data set (the test libraries too: CMake configures the tests)
#   install-deps.sh [test]       everything: also what only the test suite, the fuzz targets and
#                                the examples use (Docker, clang, Chromium, PyTorch and numpy)
set -euo pipefail
profile=${1:-test}
case "$profile" in quickstart | test) ;; *) echo "usage: $0 [quickstart|test]" >&2; exit 2 ;; esac

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libtorch-dev libopenblas0-openmp libabsl-dev libspdlog-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev libcli11-dev nlohmann-json3-dev
  # The services' Prometheus endpoints (services/common/metrics).
  prometheus-cpp-dev
  # Stream jobs (services/common/stream): the Redis Streams client, and redis-server, the broker
  # `strata` starts for a run without one (and the stream tests start for themselves).
  libhiredis-dev redis-server
  dataset-fashion-mnist
)
if [[ "$profile" == test ]]; then
  packages+=(
    # `strata render --launcher compose` is checked with `docker-compose config` (docs/deploy.md).
    docker-compose
    # The image's base is made without a registry (scripts/make-base-image.sh).
    debootstrap
    # The fuzz targets (scripts/fuzz.sh): clang 14 and its runtimes (libFuzzer, ASan, UBSan).
    clang libclang-rt-14-dev
    # Your own model and data (examples/your-own-model, tests/integration/orchestrator/
    # own_model_test.cc): TorchScript files made by PyTorch, .npy files by numpy, and the
    # exported model loaded back in Python. Strata itself never runs Python.
    python3-torch python3-numpy
    # The browser test of the reports (tests/e2e/report_browser_test.cc): headless Chromium opens
    # report.html through scripts/report-browser (playwright-core from npm, below, drives it).
    chromium
    # The metrics test scrapes a real run with a Prometheus server it starts itself
    # (tests/e2e/metrics_test.cc); the package's own service is switched off below.
    prometheus
  )
  # kubectl for the offline `kubectl kustomize` of the rendered Kubernetes files (tests/integration/
  # render): Debian 12's is 1.20, from kubernetes-client, whose kustomize the tests feed the old
  # spelling of two overlay keys (tests/integration/render/kustomize_build.h). Only where no kubectl
  # is installed: a newer one from elsewhere is used as it is.
  if ! command -v kubectl >/dev/null; then
    packages+=(kubernetes-client)
  fi
  # Node and npm for the two npm test tools below (the Kubernetes schema check and the browser
  # test's driver). Only where there is no npm: Node from elsewhere brings its own npm, and
  # Debian's npm package would not install beside it.
  if ! command -v npm >/dev/null; then
    packages+=(nodejs npm)
  fi
  # The test suite starts a Docker daemon of its own (scripts/docker-daemon.sh) and `make image`
  # needs one. Only where no dockerd exists: docker.io conflicts with Docker's own docker-ce
  # packages, and apt would remove them to install it.
  if ! command -v dockerd >/dev/null && [[ ! -x /usr/sbin/dockerd && ! -x /usr/bin/dockerd ]]; then
    packages+=(docker.io)
  fi
fi
# Peers for side-by-side benchmarks and the tests that compare against them.
if [[ "${STRATA_WITH_PEERS:-0}" == 1 ]]; then
  packages+=(python3-torch python3-sklearn)
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

# npm packages in repo-local directories (Node and npm: the packages above). Without npm the tests
# that need them say so and skip (under CI=true they fail instead).
#  - scripts/k8s-validate: the offline schema check of `strata render --launcher kubernetes`;
#  - scripts/report-browser: playwright-core, which drives Debian's Chromium for the browser test
#    of the reports (never `npx playwright install`: that downloads a browser of its own).
install_node_tools() {
  local scripts_dir dir marker
  scripts_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  # The marker of k8s-validate is its last-added package, so that an older install gets it too.
  for entry in k8s-validate:@kubernetes-models/prometheus-operator report-browser:playwright-core; do
    dir="$scripts_dir/${entry%%:*}"
    marker="$dir/node_modules/${entry#*:}/package.json"
    [[ -f "$marker" ]] && continue
    if ! command -v npm >/dev/null; then
      echo "install-deps: no npm; the tests that need scripts/${entry%%:*} will be skipped"
      continue
    fi
    echo "install-deps: npm install --prefix scripts/${entry%%:*}"
    npm install --prefix "$dir" --no-audit --no-fund --no-package-lock --loglevel=error >/dev/null
  done
}

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  [[ "$profile" == test ]] && install_node_tools
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
# Debian's prometheus package enables and starts a server of its own (port 9090, scraping
# itself); the tests start theirs on free ports and nothing here needs that one.
if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null &&
  [[ -d /run/systemd/system ]]; then
  $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
# The same for redis-server (port 6379): every run and test starts a private one on a unix socket.
if [[ " ${missing[*]} " == *" redis-server "* ]] && command -v systemctl >/dev/null &&
  [[ -d /run/systemd/system ]]; then
  $SUDO systemctl disable --now redis-server >/dev/null 2>&1 || true
fi
if [[ "$profile" == test ]]; then install_node_tools; fi
