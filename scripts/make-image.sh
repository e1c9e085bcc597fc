#!/usr/bin/env bash
# Builds the Strata image (docker/Dockerfile) in the Docker daemon of DOCKER_HOST.
#
#   scripts/make-image.sh [--from-source | --prebuilt BUILD_BIN_DIR] [--tag IMAGE]
#
#   --from-source            (default) compile inside the image build: the `runtime` target. Needs
#                            nothing on the host but a daemon; slow (LibTorch translation units,
#                            tens of minutes on two cores). `make image`.
#   --prebuilt BUILD_BIN_DIR copy binaries built on this machine (build/bin after `make build`):
#                            the `prebuilt` target, no compiling, a minute or two. The binaries
#                            link Debian 12's libraries, so the build machine must be Debian 12 as
#                            the image is. `make image-prebuilt`; the test suite's fixture.
#   --tag IMAGE              default strata:latest, the image `strata render` names.
#
# First makes the base image debian:bookworm-slim when the daemon has none (no registry needed,
# scripts/make-base-image.sh). Builds with `--network host`: apt inside the build fetches from the
# Debian mirror, and a daemon without a bridge gives build containers no network of their own.
# Prints the image's size at the end. Exit 2 with a message naming what is wrong: docker missing,
# the daemon unreachable, a binary missing.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# What the rendered files run (docs/deploy.md, "What the image must hold"), plus the single-process
# trainer. strata-health is the probe of the compose health checks.
binaries=(strata strata-ps strata-worker strata-evaluator strata-sharder strata-train strata-health)

die() {
  echo "make-image: $*" >&2
  exit 2
}
usage() {
  echo "usage: $0 [--from-source | --prebuilt BUILD_BIN_DIR] [--tag IMAGE]" >&2
  exit 2
}

mode=source
bindir=
tag=strata:latest
while [[ $# -gt 0 ]]; do
  case "$1" in
    --from-source) mode=source; shift ;;
    --prebuilt) [[ $# -ge 2 ]] || usage; mode=prebuilt; bindir=$2; shift 2 ;;
    --tag) [[ $# -ge 2 ]] || usage; tag=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage ;;
  esac
done

command -v docker >/dev/null || die "docker is not installed (apt-get install docker.io, or scripts/install-deps.sh)"
if ! err=$(docker version -f '{{.Server.Version}}' 2>&1 >/dev/null); then
  die "cannot reach the Docker daemon at ${DOCKER_HOST:-unix:///var/run/docker.sock} (DOCKER_HOST): ${err%%$'\n'*}"
fi

if [[ $mode == prebuilt ]]; then
  [[ -d "$bindir" ]] || die "no build directory $bindir (run make build first)"
  missing=()
  for b in "${binaries[@]}"; do
    [[ -f "$bindir/$b" && -x "$bindir/$b" ]] || missing+=("$b")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    die "missing in $bindir: ${missing[*]} (build them first: make build, or cmake --build BUILD_DIR --target ${missing[*]})"
  fi
fi

bash "$repo/scripts/make-base-image.sh"

# The classic builder: the daemon may have no BuildKit, and the Dockerfile needs none.
export DOCKER_BUILDKIT=0
start=$SECONDS
if [[ $mode == prebuilt ]]; then
  # A context of its own with only the binaries (and the Dockerfile): sending the repository would
  # mean sending build/, where the test suite's daemon keeps its data root.
  ctx=$(mktemp -d "${TMPDIR:-/tmp}/strata-image.XXXXXX")
  trap 'rm -rf "$ctx"' EXIT
  mkdir -p "$ctx/build/bin"
  for b in "${binaries[@]}"; do
    cp -L "$bindir/$b" "$ctx/build/bin/$b"
  done
  cp "$repo/docker/Dockerfile" "$ctx/Dockerfile"
  echo "make-image: building $tag (target prebuilt) from the binaries in $bindir"
  docker build --network host --target prebuilt -t "$tag" "$ctx"
else
  echo "make-image: building $tag (target runtime) from the sources in $repo; this compiles LibTorch code for a long time"
  docker build --network host --target runtime --build-arg BIN_DIR=docker/bin-placeholder \
    --build-arg "JOBS=${JOBS:-2}" -f "$repo/docker/Dockerfile" -t "$tag" "$repo"
fi
size=$(docker image inspect -f '{{.Size}}' "$tag")
echo "make-image: $tag built in $((SECONDS - start)) s ($mode), size $((size / 1000000)) MB"
