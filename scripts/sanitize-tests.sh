#!/usr/bin/env bash
# The concurrency-heavy tests under sanitizers, as CI runs them after the suite (`make
# test-sanitize`): the ring all-reduce, the parameter server's stress test, the worker's switch
# handshake and the stream replicas' gradient exchange under ThreadSanitizer, the live switch between real worker and server processes under AddressSanitizer
# with UndefinedBehaviorSanitizer. Each gets its own build tree with only the targets it needs, so
# the cost stays a few minutes on two cores. Prints one "N passed, N failed" line at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-2}
launcher=$PWD/scripts/compiler-launcher.sh

build_tree() {  # DIR SANITIZER TARGET...
  local dir=$1 sanitizer=$2
  shift 2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_SANITIZE="$sanitizer" \
    -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" >/dev/null || return 1
  cmake --build "$dir" -j "$jobs" --target "$@"
}

passed=0
failed=0
run() {  # NAME ENV... -- COMMAND...
  local name=$1
  shift
  local env=()
  while [[ $1 != -- ]]; do env+=("$1"); shift; done
  shift
  echo "== $name"
  if env "${env[@]}" "$@"; then
    passed=$((passed + 1))
  else
    echo "FAILED: $name"
    failed=$((failed + 1))
  fi
}

# gRPC, Abseil and protobuf from Debian are not instrumented: without ignore_noninstrumented_modules
# their lock-free hand-offs show up as false races (docs/algorithms.md, "Checked under
# ThreadSanitizer").
tsan_options="halt_on_error=1 exitcode=66 second_deadlock_stack=1 ignore_noninstrumented_modules=1 suppressions=$PWD/tests/tsan.supp"
asan_options="detect_leaks=0 halt_on_error=1 abort_on_error=0"
ubsan_options="halt_on_error=1 print_stacktrace=1"

if build_tree build-tsan thread ring_allreduce_tests ps_stress_test switch_participant_test \
    gradient_mesh_tests; then
  run "ring all-reduce (thread)" TSAN_OPTIONS="$tsan_options" -- build-tsan/bin/ring_allreduce_tests
  run "parameter server stress (thread)" TSAN_OPTIONS="$tsan_options" -- build-tsan/bin/ps_stress_test
  run "switch handshake (thread)" TSAN_OPTIONS="$tsan_options" -- build-tsan/bin/switch_participant_test
  run "stream replicas' gradient exchange (thread)" TSAN_OPTIONS="$tsan_options" -- \
    build-tsan/bin/gradient_mesh_tests
else
  echo "FAILED: the ThreadSanitizer build"
  failed=$((failed + 4))
fi

if build_tree build-asan address worker_switch_test strata-worker strata-ps; then
  # The test starts ASan-built strata-worker and strata-ps processes: an error in any of them
  # makes that process exit non-zero, which the test reports.
  run "live switch (address, undefined)" ASAN_OPTIONS="$asan_options" UBSAN_OPTIONS="$ubsan_options" \
    OMP_WAIT_POLICY=PASSIVE -- build-asan/bin/worker_switch_test
else
  echo "FAILED: the AddressSanitizer build"
  failed=$((failed + 1))
fi

echo "sanitizers: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
