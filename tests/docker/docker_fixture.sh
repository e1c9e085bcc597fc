#!/usr/bin/env bash
# The `docker` CTest fixture (tests/docker/CMakeLists.txt): the suite owns a Docker daemon of its
# own for the tests that need one, and never touches the daemon of the person running it.
#
#   docker_fixture.sh setup   STATE_DIR BIN_DIR   start the daemon, build the image from BIN_DIR
#   docker_fixture.sh cleanup STATE_DIR           remove its containers, stop it, leave nothing
#
# Where no daemon can run (not root, no dockerd, no cgroups: scripts/docker-daemon.sh exits 3),
# setup still passes but writes the reason to STRATA_TEST_DOCKER_SKIP_FILE; the tests that need
# the daemon skip with that reason. Anything else that goes wrong (the image does not build, say)
# fails setup, and CTest then does not run the tests that need it. STRATA_TEST_DOCKER=0 skips them
# on purpose (no daemon started, no image built). Under CI=true (.ci/run) neither is a skip: setup
# fails, saying why, and so does every test that needs the daemon.
# Environment (set by CMake for the fixture and for every test that requires it):
# STRATA_TEST_DOCKER_HOST, STRATA_TEST_IMAGE, STRATA_TEST_DOCKER_SKIP_FILE.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cmd=${1:-}
state=${2:-}
[[ -n "$state" ]] || { echo "usage: $0 setup STATE_DIR BIN_DIR | cleanup STATE_DIR" >&2; exit 2; }
skip_file=${STRATA_TEST_DOCKER_SKIP_FILE:?set by CMake}
image=${STRATA_TEST_IMAGE:?set by CMake}

in_ci() { [[ "${CI:-}" == true || "${CI:-}" == 1 ]]; }

setup() {
  local bindir=$1 start=$SECONDS rc=0 err
  rm -f "$skip_file"
  mkdir -p "$(dirname "$skip_file")"
  if [[ "${STRATA_TEST_DOCKER:-1}" == 0 ]]; then
    echo "switched off with STRATA_TEST_DOCKER=0" >"$skip_file"
    if in_ci; then
      echo "docker fixture: CI=true: STRATA_TEST_DOCKER=0 would leave the container tests out; failing"
      return 1
    fi
    echo "docker fixture: STRATA_TEST_DOCKER=0: the tests that need Docker will be SKIPPED"
    return 0
  fi
  err=$(mktemp)
  bash "$repo/scripts/docker-daemon.sh" start "$state" 2>"$err" || rc=$?
  cat "$err" >&2
  if [[ $rc -eq 3 ]]; then
    grep -m1 '^docker-daemon: cannot start' "$err" | sed 's/^docker-daemon: //' >"$skip_file"
    rm -f "$err"
    echo "docker fixture: $(cat "$skip_file")"
    if in_ci; then
      echo "docker fixture: CI=true: a Docker daemon is required here; failing (the tests that need it fail too)"
      return 1
    fi
    echo "docker fixture: the tests that need Docker will be SKIPPED (reason in $skip_file)"
    return 0
  fi
  rm -f "$err"
  [[ $rc -eq 0 ]] || { echo "docker fixture: scripts/docker-daemon.sh start failed (exit $rc)"; return 1; }

  # CMake read the socket path from the same script at configure time; they must agree.
  eval "$(bash "$repo/scripts/docker-daemon.sh" env "$state")"
  if [[ "$DOCKER_HOST" != "$STRATA_TEST_DOCKER_HOST" ]]; then
    echo "docker fixture: the daemon listens at $DOCKER_HOST but the tests were configured with" \
      "$STRATA_TEST_DOCKER_HOST: configure again (cmake -S . -B BUILD_DIR)"
    return 1
  fi
  local daemon_s=$((SECONDS - start))
  bash "$repo/scripts/make-image.sh" --prebuilt "$bindir" --tag "$image"
  echo "docker fixture: daemon up in ${daemon_s} s, base and $image images ready in $((SECONDS - start)) s in all"
}

cleanup() {
  bash "$repo/scripts/docker-daemon.sh" stop "$state"
  rm -f "$skip_file"
}

case "$cmd" in
  setup) [[ $# -eq 3 ]] || { echo "usage: $0 setup STATE_DIR BIN_DIR" >&2; exit 2; }; setup "$3" ;;
  cleanup) cleanup ;;
  *) echo "usage: $0 setup STATE_DIR BIN_DIR | cleanup STATE_DIR" >&2; exit 2 ;;
esac
