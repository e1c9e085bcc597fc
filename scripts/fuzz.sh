#!/usr/bin/env bash
# The fuzz targets of tests/fuzz under libFuzzer, as CI runs them after the sanitizer tests (`make
# test-fuzz`): installs what is missing, builds the targets with clang in their own tree (only
# they and the libraries they link; no LibTorch), then runs each for a bounded time, starting from
# the committed corpus (tests/fuzz/corpus/<target>, read only) and writing what it finds to a
# scratch corpus in the build tree, so the repository is never modified. Prints one summary line;
# exits non-zero if a target crashed, hung, leaked, ran out of memory or broke an invariant, and
# says where the input that did it is kept. docs/security.md, "Fuzzing".
#
#   FUZZ_SECONDS   time per target (default 45)
#   FUZZ_TARGETS   which targets (default: all nine)
#   FUZZ_BUILD_DIR the tree (default build-fuzz)
#   JOBS           parallel compiles and targets fuzzed side by side (default 2)
#   BUILD_LOCK     a file the build step holds with flock (machines shared with other builds)
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-45}
dir=${FUZZ_BUILD_DIR:-build-fuzz}
jobs=${JOBS:-2}
read -r -a targets <<<"${FUZZ_TARGETS:-tensor_codec checkpoint job_spec segment_codec tcp_frame push_pull_frame npy_file stream_event mesh_frame}"

bash scripts/install-deps.sh || exit 1

build() {
  local lock=()
  [[ -n "${BUILD_LOCK:-}" ]] && lock=(flock "$BUILD_LOCK")
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_FUZZ=ON \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_COMPILER_LAUNCHER="$PWD/scripts/compiler-launcher.sh" \
    >/dev/null || return 1
  "${lock[@]}" cmake --build "$dir" -j "$jobs" --target "${targets[@]/%/_fuzz}"
}
started=$SECONDS
if ! build; then
  echo "fuzz: the build failed"
  exit 1
fi
echo "fuzz: built in $((SECONDS - started)) s; ${#targets[@]} target(s), ${seconds} s each"

# detect_leaks: a leak is a defect too. malloc_limit_mb: no input of a few KiB has any business
# asking for 256 MiB at once; a declared size that was not checked against the bytes present
# shows up here as a crash instead of passing under the RSS limit.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
# The scratch corpus stays in the tree, so a second local run starts where the first ended.
run_target() {  # TARGET: fuzzes it into $dir/fuzz/TARGET.log, its exit code into TARGET.rc
  local t=$1
  local scratch=$dir/fuzz/corpus/$t artifacts=$dir/fuzz/artifacts/$t/
  rm -rf "$artifacts"
  mkdir -p "$scratch" "$artifacts"
  local dict=()
  [[ -f tests/fuzz/$t.dict ]] && dict=(-dict="tests/fuzz/$t.dict")
  "$dir/bin/${t}_fuzz" "$scratch" "tests/fuzz/corpus/$t" "${dict[@]}" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=256 \
    -artifact_prefix="$artifacts" -print_final_stats=1 >"$dir/fuzz/$t.log" 2>&1
  echo $? >"$dir/fuzz/$t.rc"
}

mkdir -p "$dir/fuzz"
running=0
for t in "${targets[@]}"; do
  if ((running >= jobs)); then
    wait -n
    running=$((running - 1))
  fi
  rm -f "$dir/fuzz/$t.rc"
  run_target "$t" &
  running=$((running + 1))
done
wait

passed=0
failed=0
summary=()
for t in "${targets[@]}"; do
  rc=$(cat "$dir/fuzz/$t.rc" 2>/dev/null || echo "none")
  log=$dir/fuzz/$t.log
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  corpus=$(find "$dir/fuzz/corpus/$t" "tests/fuzz/corpus/$t" -type f | wc -l)
  if [[ $rc == 0 ]]; then
    passed=$((passed + 1))
    summary+=("$t ${runs:-?} runs (${rate:-?}/s, corpus $corpus)")
  else
    failed=$((failed + 1))
    summary+=("$t FAILED")
    echo "== $t failed (exit $rc); the end of $log:"
    grep -v '^#[0-9]' "$log" | tail -n 30 | cut -c1-240
    for a in "$dir/fuzz/artifacts/$t"/*; do
      [[ -f $a ]] && echo "   input kept in $a; again: $dir/bin/${t}_fuzz $a"
    done
  fi
done
joined=$(printf '%s; ' "${summary[@]}")
echo "fuzz: $passed passed, $failed failed in $((SECONDS - started)) s: ${joined%; }"
((failed == 0))
