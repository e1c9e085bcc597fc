# Sourced by the network-namespace tests (not run). Sets STRATA_NET_PREFIX to a prefix of the
# test's own (PREFIX_TAG + pid, so that a benchmark running at the same time keeps its hosts),
# `hosts_sh` (bench/network/emulated_hosts.sh) and `repo`; then checks that namespaces can be
# made: without root or namespaces the test skips (exit 77), except under CI=true, where it fails.
#   netns_test_begin PREFIX_TAG
#   unavailable WHY       skip (or, under CI=true, fail) for a reason found later
#   fail WHAT             count a failed check and say which
#   netns_test_end        exit 1 if a check failed, else print PASSED
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
hosts_sh="$repo/bench/network/emulated_hosts.sh"
failures=0

unavailable() {
  if [[ ${CI:-} == true ]]; then
    echo "FAILED: $* (CI=true: the network namespace tests must run)"
    exit 1
  fi
  echo "SKIPPED: $*"
  exit 77
}

netns_test_begin() {
  export STRATA_NET_PREFIX="strata-$1$$"
  [[ $EUID -eq 0 ]] || unavailable "not root: network namespaces need root"
  local probe="$STRATA_NET_PREFIX-probe"
  ip netns add "$probe" 2>/dev/null || unavailable "cannot create a network namespace (ip netns add)"
  ip netns delete "$probe"
}

fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}

netns_test_end() {
  if [[ $failures -gt 0 ]]; then
    echo "$failures check(s) failed"
    exit 1
  fi
  echo "PASSED"
}
